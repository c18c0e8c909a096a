"""Why topics move or are lost, as a handful of categories for metric labels.

Reasons travel as free text (``hedwig rebalance`` prints them whole, with their numbers);
metrics need bounded label values, so each reason is filed under one category here.
"""

from __future__ import annotations

# Bounded label values for moves and losses (reasons themselves are free text with numbers).
MOVE_REASONS = ("overload", "underload", "drain", "shutdown", "requested")
LOSS_REASONS = ("ownership-removed", "session", "ledger", "stopped", "other")


def reason_label(reason: str) -> str:
    """The category of a move's or a loss's reason, for metric labels."""
    r = reason.lower()
    if r.startswith("low-load drain") or r.startswith("hub draining"):
        return "drain"
    if r.startswith("hub shutting down"):
        return "shutdown"
    if "more than" in r and "the mean" in r:
        return "overload"
    if "under" in r and "the mean" in r:
        return "underload"
    if r.startswith("ownership record removed"):
        return "ownership-removed"
    if "session" in r or "zookeeper" in r:
        return "session"
    if r.startswith("ledger failed") or "consume mark" in r:
        return "ledger"
    if r.startswith("hub stopped"):
        return "stopped"
    return "requested"


def loss_label(reason: str) -> str:
    label = reason_label(reason)
    return label if label in LOSS_REASONS else "other"
