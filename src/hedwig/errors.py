"""One exception root for everything Hedwig raises, one class per condition.

Classes are grouped by where the condition arises, because callers react differently to each:

- ``UsageError``: the caller did something the library refuses (a bad name, an oversized
  message). Retrying the same call cannot help.
- ``ProtocolError``: the peer sent bytes we cannot parse, or a frame that is illegal in the
  connection's state. The connection is unusable afterwards.
- ``ConnectionLostError`` and ``DeadlineExceededError``: the transport went away, or an
  operation ran out of time; the outcome of what was in flight is unknown.
- ``RequestError`` and its subclasses: conditions of a hub's request handling that have no
  other home (the topic is owned elsewhere, it is moving, the hub cannot serve now).
- ``MetadataError``: the metadata store refused or failed an operation (bad version, missing
  record). Library exceptions (gRPC's) never leak past the module that wraps the library; they
  are re-raised as these with ``from exc``.
- ``LedgerError``: the storage layer refused an operation (fenced, closed, entry missing).

There is exactly one class per condition, wherever it is detected: the subscription a hub finds
missing in the metadata store and the one a client is told about are both
``NoSuchSubscriptionError``. A hub answers a failed request with a wire status, and the client
raises the same class again; the table between classes and statuses is
``hedwig.protocol.status``, consulted only where a hub writes its answer and where a client
reads it.

Every exception says whether trying the same thing again later can succeed (``retriable``),
and carries what a caller needs as typed fields (``owner``, ``destination``,
``first_available``), never inside its message only.
"""

from __future__ import annotations

from typing import ClassVar


class HedwigError(Exception):
    """Root of every exception Hedwig raises on purpose."""

    # Whether the same operation may succeed if tried again later (after a backoff, or at the
    # hub a redirect names). Clients retry only these.
    retriable: ClassVar[bool] = False


# Local misuse -------------------------------------------------------------------------------


class UsageError(HedwigError, ValueError):
    """A call the library refuses; retrying it unchanged cannot succeed."""


class InvalidTopicError(UsageError):
    """A topic or subscriber name that cannot be stored safely (checked locally and by hubs)."""

    def __init__(self, message: str, *, name: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason

    @classmethod
    def for_name(cls, name: str, reason: str) -> InvalidTopicError:
        return cls(f"invalid name {name!r}: {reason}", name=name, reason=reason)


class MessageTooLargeError(UsageError):
    """A message (or a whole frame) over the limit; ``size`` and ``limit`` in bytes, 0 if
    unknown (a hub's answer carries only its message)."""

    def __init__(self, message: str, *, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


# The connection ------------------------------------------------------------------------------


class ProtocolError(HedwigError):
    """The peer broke the wire protocol; the connection must be closed."""


class MalformedBatchError(ProtocolError):
    """A batch whose messages do not add up to its count. The frame around it is intact, so a
    hub refuses only that request (INVALID_REQUEST) and keeps the connection."""


class ConnectionLostError(HedwigError):
    """The connection closed while a request was outstanding; its outcome is unknown."""

    retriable = True


class WrongReplicaError(ConnectionLostError):
    """The hub at the address a storage replica was looked up at is another hub (the address
    was reused): the replica is not reachable there, as if its hub were down."""


class OwnerUnreachableError(ConnectionLostError):
    """The hubs name an owner this client cannot reach (it is down, frozen, or cut off from
    this client). The client does not wait on it again and again: it asks the other hubs until
    the owner answers or a new one takes the topic over, which happens once the old owner's
    metadata session ends."""

    def __init__(self, message: str, *, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


class DeadlineExceededError(HedwigError, TimeoutError):
    """An operation did not finish within its deadline (retries included)."""


class TlsError(HedwigError):
    """A TLS handshake failed, or the peer refused this end's certificate (an unknown CA, a
    name that does not match, a plaintext peer on a TLS port or the reverse). Retrying with the
    same configuration cannot succeed."""


class TlsClosedError(TlsError):
    """The hub closed a TLS connection during its handshake or as soon as it was made, before
    sending a byte. Under TLS 1.3 that is how a refused client certificate usually looks (the
    hub checks it after the client has finished its side, and the alert may not reach us), but
    a hub killed at that moment looks the same. The router connects once more before taking it
    as a refusal: a refusal repeats, a dead hub then refuses the TCP connection."""


class EarlierBatchFailedError(HedwigError):
    """A publish was given up because an earlier batch of the same publisher failed for good:
    storing it now would put it in the log ahead of messages published before it."""


class SendFailedError(HedwigError):
    """Messages queued with ``HedwigClient.send`` (no future to report to) failed for good;
    ``flush`` raises this once for all of them since the last flush. ``count`` is how many,
    ``first`` the first failure (also the ``__cause__``): a message after a failed one may
    have failed only because of it (``EarlierBatchFailedError``)."""

    def __init__(self, message: str, *, count: int, first: BaseException) -> None:
        super().__init__(message)
        self.count = count
        self.first = first


# Request handling on a hub ---------------------------------------------------------------------


class RequestError(HedwigError):
    """A hub could not serve a request, for a reason of its own request handling."""


class NotResponsibleError(RequestError):
    """The hub does not own the topic; ``owner`` is the hub that does (or should), if known."""

    retriable = True

    def __init__(self, message: str, *, owner: str | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class UseLaneError(RequestError):
    """The topic is served by lanes and this publisher's messages go to another one: ``lane``
    names it (the topic of that lane). Not retried as is: the publisher sends this batch and
    the ones after it there, once every batch before it has settled."""

    def __init__(self, message: str, *, lane: str | None = None) -> None:
        super().__init__(message)
        self.lane = lane


class TopicMovingError(RequestError):
    """The topic is being handed over, or its owner just lost it; ``destination`` names the
    hub it is going to, when known."""

    retriable = True

    def __init__(self, message: str, *, destination: str | None = None) -> None:
        super().__init__(message)
        self.destination = destination


class ServiceUnavailableError(RequestError):
    """The hub cannot serve now (starting, stopping, reconnecting to its metadata store, or
    short of storage replicas); the same request may succeed later."""

    retriable = True


class SubscriptionBusyError(RequestError):
    """The subscription is attached to another connection (force-attach takes it over)."""


class InvalidRequestError(RequestError):
    """A well-framed request the hub refuses (a batch whose count lies, no messages, an
    unexpected frame)."""


class MessagesUnavailableError(RequestError):
    """The requested messages were collected by retention; ``first_available`` is the first
    sequence id still kept."""

    def __init__(self, message: str, *, first_available: int = 0) -> None:
        super().__init__(message)
        self.first_available = first_available


class OutOfOrderError(RequestError):
    """The batch would leave a gap in its publisher's sequence; ``expected`` is the publisher
    sequence the hub stores next. Retried once the publisher's earlier batches have settled."""

    retriable = True

    def __init__(self, message: str, *, expected: int = 0) -> None:
        super().__init__(message)
        self.expected = expected


class NoSuchTopicError(RequestError):
    """The topic does not exist (reads, statistics, descriptions and deletions never create
    one; publishing or subscribing does)."""


class TopicInUseError(RequestError):
    """The topic cannot be deleted while a subscription is attached (delete with force to
    close them)."""


class NotEnoughHubsError(RequestError):
    """The region has fewer hubs than the topic's replication needs, and always had: a lone hub
    with the default 3/3/2 replication. Start more hubs, or use a smaller replication (for one
    hub, 1/1/1). Not retried unless the client is asked to wait for hubs."""


class UnsupportedVersionError(RequestError):
    """The peer speaks a protocol version this end does not."""


class InternalError(RequestError):
    """A bug on the hub (logged there with its cause). Not retried: retrying a bug for the
    whole retry deadline only hides it."""


class AuthenticationError(RequestError):
    """The connection has no accepted identity: none given where one is required, or its
    credentials were refused (expired, for another audience, signed by an unknown key, from an
    unknown issuer). ``reason`` is a short category for metrics and audit lines."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class ForbiddenError(RequestError):
    """The connection's principal may not do this: ``operation`` on ``topic`` (empty for the
    cluster). The message names all three; the fields are set where the hub decides."""

    def __init__(
        self, message: str, *, principal: str = "", operation: str = "", topic: str = ""
    ) -> None:
        super().__init__(message)
        self.principal = principal
        self.operation = operation
        self.topic = topic


class InternalOnlyError(ForbiddenError):
    """A hub-to-hub request (the storage role, a claim request) sent to a hub's client
    listener: it is served only on the internal listener, to peers with a hub certificate."""


# Metadata ----------------------------------------------------------------------------------------


class MetadataError(HedwigError):
    """The metadata store refused or failed an operation."""


class BadVersionError(MetadataError):
    """A compare-and-set lost: the stored version differs from the expected one."""

    retriable = True

    def __init__(self, message: str, *, path: str = "", expected: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.expected = expected

    @classmethod
    def at(cls, path: str, expected: int) -> BadVersionError:
        return cls(f"bad version for {path}: expected {expected}", path=path, expected=expected)


class NoTopicOwnerInfoError(MetadataError):
    """No owner record exists for the topic."""


class NoTopicPersistenceInfoError(MetadataError):
    """No ledger ranges exist for the topic."""


class NoLedgerMetadataError(MetadataError):
    """No metadata exists for the ledger."""


class SubscriptionExistsError(MetadataError):
    """Creating a subscription that already exists."""


class NoSuchSubscriptionError(MetadataError):
    """The subscription does not exist (or is not attached where it is used)."""


class MetadataRefusedError(MetadataError):
    """The store refused this client: its credentials are missing or wrong, or the node's ACL
    does not let it do that (ZooKeeper's NoAuth, AuthFailed and InvalidACL, etcd's permission
    denied). Not retried: the same credentials are refused again."""


class RegionNotProtectedError(MetadataError):
    """A secured store found its region's znodes writable by someone else (made before it by
    another client, or before the region had digest credentials): it refuses the region
    rather than obey what others may have written there. Not retriable."""

    def __init__(self, message: str, *, path: str = "", acl: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.acl = acl


class MetadataUnavailableError(MetadataError):
    """The store cannot be reached now (disconnected, session lost); retrying later may work."""

    retriable = True


class NotHeldError(RequestError):
    """An acknowledgement (or nack) named messages this connection does not hold: never
    delivered to it, acknowledged already, or given to another consumer after its ack timeout
    or a nack. The messages it did hold are acknowledged all the same; ``count`` is how many
    were not. Not retried: the same request cannot succeed."""

    def __init__(self, message: str, *, count: int = 0) -> None:
        super().__init__(message)
        self.count = count


class QuotaExceededError(RequestError):
    """A count quota of a namespace is reached (``quota``: ``max_topics``, its topics;
    ``max_subscriptions``, a topic's subscriptions): nothing was made. Not retried: the same
    request fails until the namespace's limit is raised or something of it is deleted.

    ``scope`` (what travels on the wire): ``<quota>:<tenant>/<namespace>``; ``limit``: the
    limit in force."""

    def __init__(self, message: str, *, scope: str | None = None, limit: int = 0) -> None:
        super().__init__(message)
        self.scope = scope
        self.limit = limit

    @classmethod
    def of(cls, namespace: str, quota: str, limit: int, held: str) -> QuotaExceededError:
        """Namespace ``namespace``'s ``quota`` is reached: ``held`` says what holds ``limit``
        already ("it holds 10 topics")."""
        flag = quota.replace("_", "-")
        return cls(
            f"quota {quota} of namespace {namespace!r} reached: {held}, its limit (raise it "
            f"with `hedwig namespaces set {namespace} --{flag} N`)",
            scope=f"{quota}:{namespace}",
            limit=limit,
        )

    @property
    def quota(self) -> str:
        return (self.scope or "").partition(":")[0]

    @property
    def namespace(self) -> str:
        return (self.scope or "").partition(":")[2]


# Ledgers -------------------------------------------------------------------------------------


class LedgerError(HedwigError):
    """The ledger layer refused an operation."""


class LedgerFencedError(LedgerError):
    """The ledger was fenced by a recovering writer; this writer must step down."""


class LedgerClosedError(LedgerError):
    """The ledger is closed; no more entries can be added."""


class NoSuchEntryError(LedgerError):
    """The entry is not stored (beyond the end, or collected)."""


class LedgerGoneError(NoSuchEntryError):
    """A ledger the topic's record names has no metadata: it was deleted (by a deletion of
    the topic that a crash cut short between the ledgers and the records)."""


class CorruptEntryError(LedgerError):
    """An entry failed its checksum."""


class NotEnoughReplicasError(LedgerError):
    """Fewer storage replicas answered than the quorum needs."""
