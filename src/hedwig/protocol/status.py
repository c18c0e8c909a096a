"""Status codes, and the one table between exceptions and the statuses a hub answers with.

A hub answers a failed request with an ERROR frame: a status code, a message, and the typed
detail the caller needs (``Error.address``, ``Error.seq``). This table is the only
place where exceptions become statuses (``error_frame``, called where a hub writes its answer)
and statuses become exceptions again (``error_from_frame``, called where a client reads one).
Each status comes back as exactly one class, the first row that has it.

An exception no row covers is a bug: the hub logs it with its cause and answers
INTERNAL_ERROR, which clients do not retry.

Codes are part of the wire format (``docs/protocol.md``): never renumber, only add.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from hedwig.errors import (
    AuthenticationError,
    BadVersionError,
    ConnectionLostError,
    DeadlineExceededError,
    ForbiddenError,
    HedwigError,
    InternalError,
    InternalOnlyError,
    InvalidRequestError,
    InvalidTopicError,
    LedgerError,
    LedgerFencedError,
    MalformedBatchError,
    MessagesUnavailableError,
    MessageTooLargeError,
    MetadataError,
    NoSuchEntryError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    NotEnoughHubsError,
    NotHeldError,
    NotResponsibleError,
    OutOfOrderError,
    QuotaExceededError,
    RequestError,
    ServiceUnavailableError,
    SubscriptionBusyError,
    SubscriptionExistsError,
    TopicInUseError,
    TopicMovingError,
    UnsupportedVersionError,
    UseLaneError,
    WrongReplicaError,
)
from hedwig.protocol.client_frames import Error


class Status(IntEnum):
    OK = 0
    NOT_RESPONSIBLE_FOR_TOPIC = 1
    BAD_VERSION = 2
    NO_SUCH_SUBSCRIPTION = 3
    SUBSCRIPTION_EXISTS = 4
    MESSAGE_TOO_LARGE = 5
    INVALID_TOPIC = 6
    INVALID_REQUEST = 7
    SERVICE_UNAVAILABLE = 8
    TOPIC_MOVING = 9
    SUBSCRIPTION_BUSY = 10
    UNSUPPORTED_VERSION = 11
    INTERNAL_ERROR = 12
    MESSAGES_UNAVAILABLE = 13
    LEDGER_FENCED = 14
    NO_SUCH_ENTRY = 15
    OUT_OF_ORDER = 16
    NO_SUCH_TOPIC = 17
    TOPIC_IN_USE = 18
    NOT_ENOUGH_HUBS = 19
    UNAUTHENTICATED = 21
    FORBIDDEN = 22
    INTERNAL_ONLY = 23
    WRONG_REPLICA = 32
    USE_LANE = 33
    NOT_HELD = 34
    QUOTA_EXCEEDED = 40

    @property
    def label(self) -> str:
        """The status as a metric label value."""
        return self.name.lower()


MESSAGE_LIMIT = 4096  # characters of an error message that travel


@dataclass(frozen=True)
class _Row:
    error: type[HedwigError]
    status: Status
    # The exception's typed field that travels in ``Error.address`` / ``Error.seq``.
    address: str | None = None
    seq: str | None = None


# Most specific first: an exception is answered with the first row it is an instance of.
_TABLE: tuple[_Row, ...] = (
    _Row(NotResponsibleError, Status.NOT_RESPONSIBLE_FOR_TOPIC, address="owner"),
    _Row(TopicMovingError, Status.TOPIC_MOVING, address="destination"),
    _Row(ServiceUnavailableError, Status.SERVICE_UNAVAILABLE),
    _Row(SubscriptionBusyError, Status.SUBSCRIPTION_BUSY),
    _Row(InvalidRequestError, Status.INVALID_REQUEST),
    _Row(MessagesUnavailableError, Status.MESSAGES_UNAVAILABLE, seq="first_available"),
    _Row(OutOfOrderError, Status.OUT_OF_ORDER, seq="expected"),
    _Row(NoSuchTopicError, Status.NO_SUCH_TOPIC),
    _Row(TopicInUseError, Status.TOPIC_IN_USE),
    _Row(NotEnoughHubsError, Status.NOT_ENOUGH_HUBS),
    _Row(UnsupportedVersionError, Status.UNSUPPORTED_VERSION),
    _Row(InternalError, Status.INTERNAL_ERROR),
    _Row(InvalidTopicError, Status.INVALID_TOPIC),
    _Row(MessageTooLargeError, Status.MESSAGE_TOO_LARGE),
    _Row(NoSuchSubscriptionError, Status.NO_SUCH_SUBSCRIPTION),
    _Row(SubscriptionExistsError, Status.SUBSCRIPTION_EXISTS),
    _Row(BadVersionError, Status.BAD_VERSION),
    _Row(LedgerFencedError, Status.LEDGER_FENCED),
    _Row(NoSuchEntryError, Status.NO_SUCH_ENTRY),
    _Row(WrongReplicaError, Status.WRONG_REPLICA),
    _Row(UseLaneError, Status.USE_LANE, address="lane"),
    _Row(AuthenticationError, Status.UNAUTHENTICATED),
    _Row(InternalOnlyError, Status.INTERNAL_ONLY),
    _Row(ForbiddenError, Status.FORBIDDEN),
    _Row(NotHeldError, Status.NOT_HELD, seq="count"),
    _Row(QuotaExceededError, Status.QUOTA_EXCEEDED, address="scope", seq="limit"),
    # Conditions with no status of their own, answered with what the client should do:
    # a batch whose count lies is refused; an unreachable metadata store, storage replicas
    # short of a quorum, a lost or slow connection to another hub all pass: try again later.
    _Row(MalformedBatchError, Status.INVALID_REQUEST),
    _Row(MetadataError, Status.SERVICE_UNAVAILABLE),
    _Row(LedgerError, Status.SERVICE_UNAVAILABLE),
    _Row(ConnectionLostError, Status.SERVICE_UNAVAILABLE),
    _Row(DeadlineExceededError, Status.SERVICE_UNAVAILABLE),
)

# The class a client raises for each status: the first row that has it.
_BY_STATUS: dict[int, _Row] = {}
for _row in _TABLE:
    _BY_STATUS.setdefault(_row.status, _row)


def status_of(exc: BaseException) -> Status | None:
    """The status a hub answers ``exc`` with; ``None`` if no row covers it (a bug)."""
    row = _row_for(exc)
    return row.status if row is not None else None


def _row_for(exc: BaseException) -> _Row | None:
    for row in _TABLE:
        if isinstance(exc, row.error):
            return row
    return None


def error_frame(request_id: int, exc: BaseException) -> Error | None:
    """The ERROR answer to a request that failed with ``exc``; ``None`` if unmapped."""
    row = _row_for(exc)
    if row is None:
        return None
    return Error(
        request_id=request_id,
        status=row.status,
        message=str(exc)[:MESSAGE_LIMIT],
        address=getattr(exc, row.address) if row.address else None,
        seq=getattr(exc, row.seq) if row.seq else 0,
    )


def internal_error_frame(request_id: int, exc: BaseException) -> Error:
    """The answer to a failure nobody mapped (log its cause where this is called)."""
    return Error(
        request_id=request_id,
        status=Status.INTERNAL_ERROR,
        message=f"internal error: {type(exc).__name__}",
    )


def error_from_frame(frame: Error) -> HedwigError:
    """The exception a client raises for an ERROR answer."""
    row = _BY_STATUS.get(frame.status)
    if row is None:
        return RequestError(f"hub answered with unknown status {frame.status}: {frame.message}")
    make: Callable[..., HedwigError] = row.error
    typed: dict[str, object] = {}
    if row.address:
        typed[row.address] = frame.address
    if row.seq:
        typed[row.seq] = frame.seq
    return make(frame.message, **typed)


def status_label(code: int) -> str:
    try:
        return Status(code).label
    except ValueError:
        return str(code)
