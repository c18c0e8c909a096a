"""ZooKeeper's numbers, declared once: operation codes, reserved xids, watch events, create
flags, permissions, and the error codes with the exception each becomes.

Every number here is ZooKeeper's own (``ZooDefs.OpCode``, ``KeeperException.Code``,
``Watcher.Event``), part of its wire protocol: never renumber. ``ERRORS`` is the one table
between an error code in an answer and the exception a caller sees: a code ZooKeeper may send
for a missing znode, a lost compare-and-set or a taken name has a class of its own
(``NoNode``, ``hedwig.errors.BadVersionError``, ``NodeExists``...), the codes that say the
server cannot answer now (a lost connection, an expired session, a throttled request) are
``hedwig.errors.MetadataUnavailableError`` (retriable), and any other is a
``ZooKeeperError`` naming its code. ``error_for`` builds them; nothing else maps codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag

from hedwig.errors import BadVersionError, MetadataError, MetadataUnavailableError


class OpCode(IntEnum):
    """A request's type (``ZooDefs.OpCode``), in the header of every request."""

    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    PING = 11
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    MULTI_READ = 22  # ZooKeeper 3.6 and later
    AUTH = 100
    SET_WATCHES = 101
    CLOSE_SESSION = -11
    ERROR = -1  # in a multi's answer: the result of an operation that failed


class Xid(IntEnum):
    """Request ids the server treats apart (``ClientCnxn``): its notifications come with
    ``NOTIFICATION``, and it answers a ping and an authentication with the xid they carried.
    An authentication is answered out of turn (before requests sent ahead of it), so it is
    sent before any request of its connection."""

    NOTIFICATION = -1
    PING = -2
    AUTH = -4


class EventType(IntEnum):
    """What a notification says happened to the watched znode (``Watcher.Event.EventType``)."""

    NONE = -1  # a change of the session, not of a znode
    CREATED = 1
    DELETED = 2
    DATA_CHANGED = 3
    CHILDREN_CHANGED = 4


class CreateFlag(IntFlag):
    PERSISTENT = 0
    EPHEMERAL = 1
    SEQUENTIAL = 2


class Perm(IntFlag):
    """What an ACL entry allows (``ZooDefs.Perms``)."""

    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


# Errors ---------------------------------------------------------------------------------------


class ZooKeeperError(MetadataError):
    """ZooKeeper refused a request: ``code`` (``KeeperException.Code``), ``name`` (its name
    there) and the ``path`` the request was about."""

    def __init__(self, message: str, *, code: int = 0, name: str = "", path: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.path = path


class NodeExists(ZooKeeperError):
    """The znode to create exists already."""


class NoNode(ZooKeeperError):
    """The znode (or, to create one, its parent) does not exist."""


class NotEmpty(ZooKeeperError):
    """The znode to delete has children."""


class NoAuth(ZooKeeperError):
    """The znode's ACL does not let this session do that."""


class RolledBack(ZooKeeperError):
    """An operation of a ``multi`` that changed nothing because another of it failed."""


class Unimplemented(ZooKeeperError):
    """The server does not know the request (a ZooKeeper older than it needs)."""


@dataclass(frozen=True, slots=True)
class ErrorCode:
    code: int
    name: str  # as ZooKeeper names it (``KeeperException.Code``)
    raises: type[MetadataError]


ERRORS: dict[int, ErrorCode] = {
    e.code: e
    for e in (
        # In a failed multi's answer: 0 for an operation before the failed one (undone), -2
        # for one after it (not tried).
        ErrorCode(0, "RolledBack", RolledBack),
        ErrorCode(-1, "SystemError", ZooKeeperError),
        ErrorCode(-2, "RuntimeInconsistency", RolledBack),
        ErrorCode(-3, "DataInconsistency", ZooKeeperError),
        ErrorCode(-4, "ConnectionLoss", MetadataUnavailableError),
        ErrorCode(-5, "MarshallingError", ZooKeeperError),
        ErrorCode(-6, "Unimplemented", Unimplemented),
        ErrorCode(-7, "OperationTimeout", MetadataUnavailableError),
        ErrorCode(-8, "BadArguments", ZooKeeperError),
        ErrorCode(-12, "UnknownSession", MetadataUnavailableError),
        ErrorCode(-13, "NewConfigNoQuorum", MetadataUnavailableError),
        ErrorCode(-14, "ReconfigInProgress", MetadataUnavailableError),
        ErrorCode(-100, "APIError", ZooKeeperError),
        ErrorCode(-101, "NoNode", NoNode),
        ErrorCode(-102, "NoAuth", NoAuth),
        ErrorCode(-103, "BadVersion", BadVersionError),
        ErrorCode(-108, "NoChildrenForEphemerals", ZooKeeperError),
        ErrorCode(-110, "NodeExists", NodeExists),
        ErrorCode(-111, "NotEmpty", NotEmpty),
        ErrorCode(-112, "SessionExpired", MetadataUnavailableError),
        ErrorCode(-113, "InvalidCallback", ZooKeeperError),
        ErrorCode(-114, "InvalidACL", ZooKeeperError),
        ErrorCode(-115, "AuthFailed", ZooKeeperError),
        ErrorCode(-118, "SessionMoved", MetadataUnavailableError),
        ErrorCode(-119, "NotReadOnly", ZooKeeperError),
        ErrorCode(-120, "EphemeralOnLocalSession", ZooKeeperError),
        ErrorCode(-121, "NoWatcher", ZooKeeperError),
        ErrorCode(-122, "RequestTimeout", MetadataUnavailableError),
        ErrorCode(-123, "ReconfigDisabled", ZooKeeperError),
        ErrorCode(-124, "SessionClosedRequireSaslAuth", ZooKeeperError),
        ErrorCode(-125, "QuotaExceeded", ZooKeeperError),
        ErrorCode(-127, "Throttled", MetadataUnavailableError),
    )
}

CONNECTION_LOSS = -4
NO_NODE = -101
SESSION_EXPIRED = -112


def error_for(code: int, path: str, version: int = -1) -> MetadataError:
    """The exception for error ``code`` of a request on ``path`` (``version``: the one it
    required, for a lost compare-and-set)."""
    known = ERRORS.get(code)
    if known is None:
        return ZooKeeperError(
            f"ZooKeeper error {code} at {path}", code=code, name=str(code), path=path
        )
    if known.raises is BadVersionError:
        return BadVersionError.at(path, version)
    if known.raises is MetadataUnavailableError:
        return MetadataUnavailableError(f"ZooKeeper unavailable ({known.name}) at {path}")
    if issubclass(known.raises, ZooKeeperError):
        return known.raises(
            f"ZooKeeper error {known.name} at {path}", code=code, name=known.name, path=path
        )
    return known.raises(f"ZooKeeper error {known.name} at {path}")  # pragma: no cover
