"""One exception root for everything Hedwig raises.

Errors are split by origin, because callers react differently to each:

- ``UsageError``: the caller did something the library refuses locally (bad topic name,
  oversized message). Retrying the same call cannot help.
- ``ProtocolError``: the peer sent bytes we cannot parse, or a frame that is illegal in the
  connection's state. The connection is unusable afterwards.
- ``ServerError`` and its subclasses: a hub answered a request with a non-OK status. Each status
  code maps to exactly one class (see ``hedwig.protocol.status``), so ``except
  NotResponsibleError`` reads like the protocol.
- ``MetadataError`` and its subclasses: the metadata store refused or failed an operation
  (bad version, missing node). Library exceptions (kazoo's) never leak past the module that
  wraps the library; they are re-raised as these with ``from exc``.
- ``LedgerError`` and its subclasses: the storage layer refused an operation (fenced, closed).
- ``ConnectionLostError``: the transport went away; the request may or may not have happened.
"""

from __future__ import annotations


class HedwigError(Exception):
    """Root of every exception Hedwig raises on purpose."""


class UsageError(HedwigError, ValueError):
    """A call the library refuses locally; retrying it unchanged cannot succeed."""


class InvalidTopicError(UsageError):
    """A topic or subscriber name that cannot be stored safely."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid name {name!r}: {reason}")
        self.name = name
        self.reason = reason


class ProtocolError(HedwigError):
    """The peer broke the wire protocol; the connection must be closed."""


class ConnectionLostError(HedwigError):
    """The connection closed while a request was outstanding; its outcome is unknown."""


class TimeoutError_(HedwigError, TimeoutError):
    """An operation did not finish within its deadline."""


class MetadataError(HedwigError):
    """The metadata store refused or failed an operation."""


class BadVersionError(MetadataError):
    """A compare-and-set lost: the stored version differs from the expected one."""

    def __init__(self, path: str, expected: int) -> None:
        super().__init__(f"bad version for {path}: expected {expected}")
        self.path = path
        self.expected = expected


class NoTopicOwnerInfoError(MetadataError):
    """No owner record exists for the topic."""


class NoTopicPersistenceInfoError(MetadataError):
    """No ledger ranges exist for the topic."""


class NoLedgerMetadataError(MetadataError):
    """No metadata exists for the ledger."""


class SubscriptionStateExistsError(MetadataError):
    """Creating a subscription that already exists."""


class NoSubscriptionStateError(MetadataError):
    """The subscription does not exist."""


class MetadataUnavailableError(MetadataError):
    """The store cannot be reached now (disconnected, session lost); retrying later may work."""


class LedgerError(HedwigError):
    """The ledger layer refused an operation."""


class LedgerFencedError(LedgerError):
    """The ledger was fenced by a recovering writer; this writer must step down."""


class LedgerClosedError(LedgerError):
    """The ledger is closed; no more entries can be added."""


class NoSuchEntryError(LedgerError):
    """The entry is not stored (beyond the end, or collected)."""


class CorruptEntryError(LedgerError):
    """An entry failed its checksum."""


class NotEnoughReplicasError(LedgerError):
    """Fewer storage replicas answered than the quorum needs."""
