"""The hub's bundle settings: whether it owns topics by bundle, and how a region's map starts.

One group of its own (``BundleSettings``), given to the hub beside its configuration and
passed to the parts that own topics. Off by default: a hub owns topics one by one, each with
its own owner record, as before; on, it claims bundles (``hedwig.hub.owning.bundles``). Every
hub of a region must run with the same choice (a region of both kinds would have two owners
of one topic, one on its topic's record and one on its bundle's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.metadata.bundles import DEFAULT_BUNDLES, MAX_BUNDLES

# The environment variables of the settings, as the hub's flags' are named
# (``docs/operations.md``).
ENV = {
    "enabled": "HEDWIG_BUNDLES",
    "initial_bundles": "HEDWIG_INITIAL_BUNDLES",
    "unload_idle_s": "HEDWIG_UNLOAD_IDLE_S",
}


@dataclass(frozen=True, slots=True)
class BundleSettings:
    # Own topics by bundle: one owner record per bundle, topics loaded when first asked for.
    enabled: bool = False
    # Bundles a region's map starts with, if the first hub finds none (a power of two: the
    # map's equal ranges stay equal when split in halves). 32, Pulsar's 5.0 default: enough
    # for three hubs to share evenly, few enough that each holds many topics.
    initial_bundles: int = DEFAULT_BUNDLES
    # Seconds a topic of an owned bundle stays loaded with nobody publishing or attached:
    # then it is let go (its ledger closed, its state dropped) and loaded again by the next
    # request. Five minutes: a topic used less often pays a take-over (a few milliseconds,
    # and a new ledger) per use; one used more often stays loaded, so an idle topic costs
    # memory only while it is in use.
    unload_idle_s: float = 300.0

    def __post_init__(self) -> None:
        if self.unload_idle_s <= 0:
            raise UsageError(f"unload idle: seconds above 0, got {self.unload_idle_s}")
        n = self.initial_bundles
        if n < 1 or n > MAX_BUNDLES or n & (n - 1):
            raise UsageError(f"initial bundles: a power of two from 1 to {MAX_BUNDLES}, got {n}")

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        enabled: bool | None = None,
        initial_bundles: int | None = None,
        unload_idle_s: float | None = None,
    ) -> BundleSettings:
        """Defaults, then the variables (``ENV``), then the arguments given (flags);
        ``UsageError`` for a value that is not one."""
        env = os.environ if environ is None else environ
        if enabled is None and (raw := env.get(ENV["enabled"])) is not None:
            if raw.lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
                raise UsageError(f"{ENV['enabled']}={raw!r}: expected true or false")
            enabled = raw.lower() in ("1", "true", "yes", "on")
        if initial_bundles is None and (raw := env.get(ENV["initial_bundles"])):
            try:
                initial_bundles = int(raw)
            except ValueError as exc:
                raise UsageError(f"{ENV['initial_bundles']}={raw!r}: {exc}") from exc
        if unload_idle_s is None and (raw := env.get(ENV["unload_idle_s"])):
            try:
                unload_idle_s = float(raw)
            except ValueError as exc:
                raise UsageError(f"{ENV['unload_idle_s']}={raw!r}: {exc}") from exc
        defaults = cls()
        return cls(
            enabled=bool(enabled),
            initial_bundles=defaults.initial_bundles
            if initial_bundles is None
            else initial_bundles,
            unload_idle_s=defaults.unload_idle_s if unload_idle_s is None else unload_idle_s,
        )
