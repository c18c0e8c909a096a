"""The ZooKeeper codec (``hedwig.metadata.zookeeper.client``'s ``jute``, ``records``,
``multi``, ``framing``, ``codes``): every declared record round-trips, the bytes are
ZooKeeper's (checked against ZooKeeper's own layouts and kazoo's serializers, an independent
implementation), frames are cut from bytes however they arrive, and malformed input is
refused with ``ProtocolError``."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.protocol import serialization as kazoo_wire
from kazoo.security import ACL as KazooAcl
from kazoo.security import Id as KazooId

from hedwig.errors import BadVersionError, MetadataUnavailableError, ProtocolError
from hedwig.metadata.zookeeper.client import codes
from hedwig.metadata.zookeeper.client.framing import (
    REQUEST_TYPES,
    FrameSplitter,
    put_connect,
    put_reply,
    put_request,
    read_reply_header,
    read_request,
)
from hedwig.metadata.zookeeper.client.jute import (
    BOOL_TYPE as BOOL,
)
from hedwig.metadata.zookeeper.client.jute import (
    BUFFER_TYPE as BUFFER,
)
from hedwig.metadata.zookeeper.client.jute import (
    INT_TYPE as INT,
)
from hedwig.metadata.zookeeper.client.jute import (
    LONG_TYPE as LONG,
)
from hedwig.metadata.zookeeper.client.jute import (
    USTRING_TYPE as USTRING,
)
from hedwig.metadata.zookeeper.client.jute import (
    JuteRecord,
    JuteType,
    Nested,
    Trailing,
    Vector,
    decode_whole,
)
from hedwig.metadata.zookeeper.client.multi import (
    MultiReadRequest,
    MultiRequest,
    MultiResponse,
)
from hedwig.metadata.zookeeper.client.records import (
    Acl,
    CheckResult,
    CheckVersionRequest,
    ConnectRequest,
    ConnectResponse,
    Create2Response,
    CreateRequest,
    CreateResponse,
    DeleteRequest,
    DeleteResult,
    ErrorResult,
    GetChildrenRequest,
    GetChildrenResponse,
    GetDataRequest,
    GetDataResponse,
    Id,
    SetDataRequest,
    SetWatchesRequest,
    Stat,
    StatResponse,
    WatcherEvent,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


def _values(kind: JuteType) -> st.SearchStrategy[Any]:
    if kind is INT:
        return I32
    if kind is LONG:
        return I64
    if kind is BOOL:
        return st.booleans()
    if kind is BUFFER:
        return st.binary(max_size=64)
    if kind is USTRING:
        return st.text(max_size=32)
    if isinstance(kind, Vector):
        return st.lists(_values(kind.item), max_size=4).map(tuple)
    if isinstance(kind, Nested):
        return records(kind.record)
    if isinstance(kind, Trailing):
        return _values(kind.inner)
    raise AssertionError(kind)


def records(cls: type[JuteRecord]) -> st.SearchStrategy[Any]:
    return st.builds(cls, *(_values(kind) for _, kind in cls.FIELDS))


PLAIN = [c for c in REQUEST_TYPES.values() if c not in (MultiRequest, MultiReadRequest)]
ANSWERS = [
    ConnectRequest,
    ConnectResponse,
    WatcherEvent,
    Stat,
    Acl,
    CreateResponse,
    Create2Response,
    StatResponse,
    GetDataResponse,
    GetChildrenResponse,
    ErrorResult,
]


@pytest.mark.parametrize("cls", PLAIN + ANSWERS, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_declared_record_round_trips(cls: type[JuteRecord], data: st.DataObject) -> None:
    record = data.draw(records(cls))
    assert cls.decode(record.encode()) == record


WRITES = st.one_of(
    records(CreateRequest),
    records(DeleteRequest),
    records(SetDataRequest),
    records(CheckVersionRequest),
)
RESULTS = st.one_of(
    records(CreateResponse),
    records(Create2Response),
    st.just(DeleteResult()),
    records(StatResponse),
    st.just(CheckResult()),
    records(GetDataResponse),
    records(GetChildrenResponse),
    records(ErrorResult),
)


@settings(max_examples=60, deadline=None)
@given(
    writes=st.lists(WRITES, max_size=5).map(tuple),
    reads=st.lists(st.one_of(records(GetDataRequest), records(GetChildrenRequest)), max_size=5),
    results=st.lists(RESULTS, max_size=6).map(tuple),
    xid=I32,
)
def test_multis_round_trip_in_their_frames(
    writes: tuple[Any, ...], reads: list[Any], results: tuple[Any, ...], xid: int
) -> None:
    for request in (MultiRequest(writes), MultiReadRequest(tuple(reads))):
        out = bytearray()
        put_request(out, xid, request)
        assert int.from_bytes(out[:4], "big") == len(out) - 4
        assert read_request(bytes(out[4:])) == (xid, request)
    answer = MultiResponse(results)
    assert MultiResponse.decode(answer.encode()) == answer


def test_the_bytes_are_zookeepers() -> None:
    """Layouts as ``zookeeper.jute`` and ``ClientCnxn`` write them, and as kazoo (written
    apart from this codec) serializes the same requests."""
    assert GetDataRequest("/a", True).encode() == b"\0\0\0\x02/a\x01"
    out = bytearray()
    put_request(out, 7, CheckVersionRequest("/b", -1))
    assert bytes(out) == struct.pack(">iii", 18, 7, 13) + b"\0\0\0\x02/b" + b"\xff" * 4
    connect = ConnectRequest(0, 99, 6000, 0x1234, b"\0" * 16)
    assert (
        connect.encode() == kazoo_wire.Connect(0, 99, 6000, 0x1234, b"\0" * 16, False).serialize()
    )
    acl = (Acl(31, Id("world", "anyone")),)
    kacl = [KazooAcl(31, KazooId("world", "anyone"))]
    assert (
        CreateRequest("/n", b"v", acl, 1).encode()
        == kazoo_wire.Create("/n", b"v", kacl, 1).serialize()
    )
    assert SetDataRequest("/n", b"v", 3).encode() == kazoo_wire.SetData("/n", b"v", 3).serialize()
    multi = MultiRequest((CreateRequest("/n", b"v", acl, 0), DeleteRequest("/m", 2)))
    kmulti = kazoo_wire.Transaction(
        [kazoo_wire.Create("/n", b"v", kacl, 0), kazoo_wire.Delete("/m", 2)]
    )
    assert multi.encode() == bytes(kmulti.serialize())
    watches = SetWatchesRequest(5, ("/a", "/b"), (), ("/c",))
    assert (
        watches.encode()
        == (struct.pack(">qi", 5, 2) + b"\0\0\0\x02/a\0\0\0\x02/b" + struct.pack(">ii", 0, 1))
        + b"\0\0\0\x02/c"
    )
    stat = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    assert Stat.decode(kazoo_wire.stat_struct.pack(*stat)) == Stat(*stat)


def test_a_null_buffer_string_or_vector_reads_as_empty_and_a_trailing_field_may_be_absent() -> None:
    """Java writes -1 for a null; an older server leaves ``read_only`` out of its answer."""
    null = struct.pack(">i", -1)
    assert GetDataResponse.decode(null + Stat(*range(11)).encode()).data == b""
    assert WatcherEvent.decode(struct.pack(">ii", -1, 3) + null).path == ""
    assert GetChildrenResponse.decode(null).children == ()
    old = struct.pack(">iiq", 0, 4000, 9) + struct.pack(">i", 2) + b"pw"
    assert ConnectResponse.decode(old) == ConnectResponse(0, 4000, 9, b"pw", False)
    assert ConnectResponse.decode(old + b"\x01").read_only


@pytest.mark.parametrize(
    ("cls", "data", "why"),
    [
        (Stat, b"\0" * 67, "cut short"),
        (GetDataRequest, struct.pack(">i", 5) + b"/a", "past the end"),
        (GetDataRequest, struct.pack(">i", -2) + b"\x01", "length -2"),
        (CreateResponse, struct.pack(">i", 2) + b"\xff\xfe", "not UTF-8"),
        (DeleteRequest, struct.pack(">i", 1) + b"/" + b"\0" * 5, "bytes after"),
        (GetChildrenResponse, struct.pack(">i", 1_000_000), "items runs past"),
        (GetChildrenResponse, struct.pack(">i", -5), "vector of -5"),
        (MultiResponse, struct.pack(">iBi", 99, 0, 0), "type 99"),
        (MultiRequest, struct.pack(">iBi", 4, 0, -1), "cut short"),
    ],
)
def test_malformed_records_are_refused(cls: type[JuteRecord], data: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        cls.decode(data)


def test_malformed_frames_are_refused() -> None:
    with pytest.raises(ProtocolError, match="unknown type 77"):
        read_request(struct.pack(">ii", 1, 77))
    with pytest.raises(ProtocolError, match="no header"):
        read_reply_header(b"\0" * 15)
    with pytest.raises(ProtocolError, match="frame of -1 bytes"):
        FrameSplitter().feed(struct.pack(">i", -1))
    with pytest.raises(ProtocolError, match="frame of 1024 bytes"):
        FrameSplitter(max_frame=1000).feed(struct.pack(">i", 1024))
    with pytest.raises(ProtocolError):
        decode_whole(ConnectResponse.read, b"\0\0", 0)


def test_a_frame_is_cut_from_what_arrived_whatever_the_pieces() -> None:
    """Bytes arrive as the network splits them: a frame spread over several reads is put
    together, several in one read are handed out one by one, and a frame not yet whole is
    held, not copied again, until it is."""
    frames = [b"a" * 7, b"", b"b" * 300, b"c"]
    wire = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    splitter = FrameSplitter()
    got = []
    for piece in (wire[:3], wire[3:9], wire[9:200], wire[200:]):
        got += splitter.feed(piece)
    assert got == frames and splitter.held == 0
    assert splitter.feed(b"\0\0\0\2x") == [] and splitter.held == 5
    assert splitter.feed(b"y\0\0\0\1") == [b"xy"] and splitter.held == 4
    assert splitter.feed(b"z") == [b"z"] and splitter.held == 0


@settings(max_examples=80, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=40), max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=10),
)
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut(
    frames: list[bytes], cuts: list[int]
) -> None:
    wire = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    bounds = sorted({c for c in cuts if c < len(wire)} | {0, len(wire)})
    splitter = FrameSplitter()
    got = []
    for start, end in itertools.pairwise(bounds):
        got += splitter.feed(wire[start:end])
    assert got == frames and splitter.held == 0


def test_answers_and_the_handshake_in_their_frames() -> None:
    out = bytearray()
    put_reply(out, 3, 0x55, 0, StatResponse(Stat(*range(11))))
    frame = bytes(out[4:])
    assert read_reply_header(frame) == (3, 0x55, 0)
    assert StatResponse.decode(frame[16:]).stat.version == 4
    out = bytearray()
    put_connect(out, ConnectResponse(0, 6000, 7, b"p" * 16))
    (frame,) = FrameSplitter().feed(bytes(out))
    assert ConnectResponse.decode(frame).session_id == 7


def test_error_codes_become_their_exceptions() -> None:
    """One table: a missing znode, a taken name, a lost compare-and-set have classes of their
    own; the codes of a server that cannot answer now are retriable unavailability; any
    other code is a ZooKeeperError naming it."""
    no_node = codes.error_for(-101, "/x")
    assert isinstance(no_node, codes.NoNode) and no_node.path == "/x" and no_node.code == -101
    assert isinstance(codes.error_for(-110, "/x"), codes.NodeExists)
    bad = codes.error_for(-103, "/x", 4)
    assert isinstance(bad, BadVersionError) and bad.path == "/x" and bad.expected == 4
    for unavailable in (-4, -7, -112, -118, -122, -127):
        assert isinstance(codes.error_for(unavailable, "/x"), MetadataUnavailableError)
    assert "NoAuth" in str(codes.error_for(-102, "/x"))
    odd = codes.error_for(-999, "/x")
    assert type(odd) is codes.ZooKeeperError and odd.code == -999
    assert all(e.code == c for c, e in codes.ERRORS.items())
