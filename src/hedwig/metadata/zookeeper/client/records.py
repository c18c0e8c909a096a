"""ZooKeeper's protocol records, as ``zookeeper.jute`` declares them.

Each record is declared once (``hedwig.metadata.zookeeper.client.jute`` generates its codec)
with the fields, names aside, of its ``zookeeper.jute`` class. A request record names its
operation code and the record its answer carries (``@request``); ``REQUESTS`` is that table,
by code (with ``multi`` and ``multiRead``: ``framing.REQUEST_TYPES``).
The records of the handshake (``ConnectRequest``, ``ConnectResponse``) travel without a
header (``hedwig.metadata.zookeeper.client.framing``). Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, ClassVar, TypeVar

from hedwig.metadata.zookeeper.client.codes import OpCode
from hedwig.metadata.zookeeper.client.jute import (
    Bool,
    Buffer,
    Int,
    JuteRecord,
    Long,
    Nested,
    Repeated,
    TrailingBool,
    UString,
    UStrings,
    jute,
)

# Data ------------------------------------------------------------------------------------------


@jute
class Id(JuteRecord):
    scheme: UString
    id: UString


@jute
class Acl(JuteRecord):
    perms: Int
    id: Id


@jute
class Stat(JuteRecord):
    czxid: Long  # the zxid of the znode's creation
    mzxid: Long  # of its last change
    ctime: Long  # ms since the epoch
    mtime: Long
    version: Int  # of its data: what a compare-and-set compares
    cversion: Int  # of its children
    aversion: Int  # of its ACL
    ephemeral_owner: Long  # the session of an ephemeral znode, else 0
    data_length: Int
    num_children: Int
    pzxid: Long  # the zxid of the last change of its children


# The same ACL goes with every create: its encoding is kept (``Repeated``).
Acls = Annotated[tuple[Acl, ...], Repeated(Nested(Acl))]


# Session ---------------------------------------------------------------------------------------


@jute
class ConnectRequest(JuteRecord):
    protocol_version: Int
    last_zxid_seen: Long
    time_out: Int  # ms: the session timeout asked for
    session_id: Long  # 0: a new session
    passwd: Buffer
    read_only: TrailingBool = False


@jute
class ConnectResponse(JuteRecord):
    protocol_version: Int
    time_out: Int  # ms, as the server negotiated it; 0 or less: the session has expired
    session_id: Long
    passwd: Buffer
    read_only: TrailingBool = False


@jute
class WatcherEvent(JuteRecord):
    type: Int  # EventType
    state: Int  # Watcher.Event.KeeperState: 3 (SyncConnected) for a znode's event
    path: UString


@jute
class ReplyHeader(JuteRecord):
    xid: Int
    zxid: Long
    err: Int


@jute
class MultiHeader(JuteRecord):
    type: Int
    done: Bool
    err: Int


@jute
class Empty(JuteRecord):
    """The body of a request or an answer that carries nothing (a ping, a delete's answer)."""


# Answers ---------------------------------------------------------------------------------------


@jute
class CreateResponse(JuteRecord):
    path: UString


@jute
class Create2Response(JuteRecord):
    path: UString
    stat: Stat


@jute
class StatResponse(JuteRecord):
    """``exists``, ``setData`` and ``setACL`` answer with the znode's stat alone."""

    stat: Stat


@jute
class GetDataResponse(JuteRecord):
    data: Buffer
    stat: Stat


@jute
class GetChildrenResponse(JuteRecord):
    children: UStrings


@jute
class GetAclResponse(JuteRecord):
    acl: Acls
    stat: Stat


@jute
class DeleteResult(JuteRecord):
    """A ``multi``'s delete that took effect."""


@jute
class CheckResult(JuteRecord):
    """A ``multi``'s version check that held."""


@jute
class ErrorResult(JuteRecord):
    """An operation of a ``multi`` or ``multiRead`` that failed: its error code."""

    err: Int


# Requests --------------------------------------------------------------------------------------


class Request(JuteRecord):
    """A request record: its operation code and the record its answer carries."""

    __slots__ = ()
    OPCODE: ClassVar[OpCode]
    RESPONSE: ClassVar[type[JuteRecord]]


REQUESTS: dict[int, type[Request]] = {}
Q = TypeVar("Q", bound=type[Request])


def request(opcode: OpCode, response: type[JuteRecord]) -> Callable[[Q], Q]:
    """Declare a request record of ``opcode`` answered with ``response``."""

    def build(cls: Q) -> Q:
        cls.OPCODE = opcode
        cls.RESPONSE = response
        REQUESTS[opcode] = cls
        return cls

    return build


@request(OpCode.CREATE, CreateResponse)
@jute
class CreateRequest(Request):
    path: UString
    data: Buffer
    acl: Acls
    flags: Int  # CreateFlag


@request(OpCode.CREATE2, Create2Response)
@jute
class Create2Request(Request):
    path: UString
    data: Buffer
    acl: Acls
    flags: Int


@request(OpCode.DELETE, Empty)
@jute
class DeleteRequest(Request):
    path: UString
    version: Int  # -1: any


@request(OpCode.EXISTS, StatResponse)
@jute
class ExistsRequest(Request):
    path: UString
    watch: Bool


@request(OpCode.GET_DATA, GetDataResponse)
@jute
class GetDataRequest(Request):
    path: UString
    watch: Bool


@request(OpCode.SET_DATA, StatResponse)
@jute
class SetDataRequest(Request):
    path: UString
    data: Buffer
    version: Int


@request(OpCode.GET_ACL, GetAclResponse)
@jute
class GetAclRequest(Request):
    path: UString


@request(OpCode.SET_ACL, StatResponse)
@jute
class SetAclRequest(Request):
    path: UString
    acl: Acls
    version: Int


@request(OpCode.GET_CHILDREN, GetChildrenResponse)
@jute
class GetChildrenRequest(Request):
    path: UString
    watch: Bool


@request(OpCode.CHECK, Empty)
@jute
class CheckVersionRequest(Request):
    path: UString
    version: Int


@request(OpCode.SET_WATCHES, Empty)
@jute
class SetWatchesRequest(Request):
    """Watches set on many znodes at once: the server sets each, or notifies at once for a
    znode that is gone (a data watch), exists (an exist watch) or changed after
    ``relative_zxid``."""

    relative_zxid: Long
    data_watches: UStrings
    exist_watches: UStrings
    child_watches: UStrings


@request(OpCode.AUTH, Empty)
@jute
class AuthRequest(Request):
    type: Int  # 0
    scheme: UString
    auth: Buffer


@request(OpCode.PING, Empty)
@jute
class PingRequest(Request):
    pass


@request(OpCode.CLOSE_SESSION, Empty)
@jute
class CloseRequest(Request):
    pass
