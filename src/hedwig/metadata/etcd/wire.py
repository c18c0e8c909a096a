"""etcd's transaction requests written as bytes, without protobuf's message objects.

Every metadata operation on etcd is a transaction (``rpc.proto``'s ``TxnRequest``) of a few
comparisons and operations on single keys. Built as protobuf messages, a take-over's claim cost
about 30 us of a hub's time before it was sent (eight message objects made, then serialized,
then walked again for the keys it writes), and a failover is tens of thousands of them on a
hub already short of CPU. The messages are small and their fields few and fixed, so this
module writes their serialized form directly from the keys and values: the bytes protobuf
would make of the same messages (``tests/test_etcd_wire.py`` holds them equal for any keys,
values and revisions, and etcd runs them in every etcd test), each part knowing the key it
writes so the batcher (``batches``) need not parse anything back.

Answers are still parsed by protobuf (in C, cheaply); only reading them field by field costs,
which ``kv.KeyValues.txn`` keeps to the operations that read.

The fields written (etcd's ``api/etcdserverpb/rpc.proto``), each a protobuf key (field number
<< 3 | wire type) and, for bytes and messages, a length:

- ``TxnRequest``: compare 1, success 2, failure 3 (messages);
- ``RequestOp``: request_range 1, request_put 2, request_delete_range 3, request_txn 4
  (a oneof of messages: written even when empty);
- ``RangeRequest``, ``DeleteRangeRequest``: key 1, range_end 2; ``PutRequest``: key 1,
  value 2, lease 3 (varint);
- ``Compare``: result 1, target 2 (enums), key 3, then the oneof ``target_union``:
  create_revision 5, mod_revision 6 (varints: written even when zero, being in a oneof).

Fields at their default (an empty key or value, a zero lease or enum) are left out, as
protobuf leaves them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


def varint(n: int) -> bytes:
    """A non-negative integer as protobuf's base-128 varint."""
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


class _Tag:
    """A length-delimited field's key, with its key and length prefixes made in advance for
    the lengths of one byte: most keys, values and operations here are shorter than 128
    bytes, and a take-over writes a few dozen of these fields (one concatenation each, not
    three and a call)."""

    __slots__ = ("heads", "tag")

    def __init__(self, number: int) -> None:
        self.tag = bytes((number << 3 | 2,))
        self.heads = [self.tag + b for b in _SMALL]

    def field(self, body: bytes) -> bytes:
        """The field holding ``body``: its key, its length, its bytes."""
        n = len(body)
        return (self.heads[n] if n < 0x80 else self.tag + varint(n)) + body

    def optional(self, value: bytes) -> bytes:
        """A bytes field left out when empty, as proto3 leaves it."""
        return self.field(value) if value else b""


# The length-delimited fields written here, by message (field numbers above).
_COMPARE, _SUCCESS, _FAILURE = _Tag(1), _Tag(2), _Tag(3)  # TxnRequest
_RANGE, _PUT, _DELETE, _REQUEST_TXN = _Tag(1), _Tag(2), _Tag(3), _Tag(4)  # RequestOp
_KEY, _VALUE = _Tag(1), _Tag(2)  # Range, Put, DeleteRange (range_end is 2 too)
_COMPARE_KEY = _Tag(3)  # Compare


class Op(NamedTuple):
    """One operation of a transaction's branch (a serialized ``RequestOp``) and what the
    batcher must know of it: the key it writes (``None``: it writes nothing), and whether it
    writes a range of keys (it then goes to etcd alone)."""

    raw: bytes
    writes: bytes | None = None
    ranged: bool = False

    @property
    def reads(self) -> bool:
        """Whether its answer is a key read (a ``RangeResponse``)."""
        return self.raw[:1] == _RANGE.tag


def put(key: bytes, value: bytes, lease: int = 0) -> Op:
    body = _KEY.optional(key) + _VALUE.optional(value)
    if lease:
        body += b"\x18" + varint(lease)
    return Op(_PUT.field(body), key)


def get(key: bytes) -> Op:
    return Op(_RANGE.field(_KEY.optional(key)))


def delete(key: bytes, end: bytes = b"") -> Op:
    """A delete of ``key``, or of every key from it up to ``end`` (exclusive)."""
    return Op(_DELETE.field(_KEY.optional(key) + _VALUE.optional(end)), key, ranged=bool(end))


# Compare: result 1 (EQUAL 0, GREATER 1), target 2 (CREATE 1, MOD 2).
_GREATER = b"\x08\x01"
_CREATE, _MOD = b"\x10\x01", b"\x10\x02"
_CREATE_REVISION_0 = b"\x28\x00"


def exists(key: bytes) -> bytes:
    """The comparison "``key`` exists" (its create revision is above 0)."""
    return _GREATER + _CREATE + _COMPARE_KEY.optional(key) + _CREATE_REVISION_0


def missing(key: bytes) -> bytes:
    """The comparison "``key`` does not exist" (its create revision is 0)."""
    return _CREATE + _COMPARE_KEY.optional(key) + _CREATE_REVISION_0


def modified_at(key: bytes, mod: int) -> bytes:
    """The comparison "``key`` was last modified at revision ``mod``" (a compare-and-set's)."""
    return _MOD + _COMPARE_KEY.optional(key) + b"\x30" + varint(mod)


class Txn(NamedTuple):
    """A serialized ``TxnRequest`` and what the batcher must know of it."""

    raw: bytes
    # Its widest level: the most comparisons or operations of one branch (etcd limits it).
    width: int
    # The keys either branch writes; ``None``: a range, which goes alone.
    writes: frozenset[bytes] | None


def txn(compare: Sequence[bytes], success: Sequence[Op], failure: Sequence[Op] = ()) -> Txn:
    parts = [_COMPARE.field(c) for c in compare]
    writes: set[bytes] | None = set()
    for branch, ops in ((_SUCCESS, success), (_FAILURE, failure)):
        for op in ops:
            parts.append(branch.field(op.raw))
            if op.ranged:
                writes = None
            elif op.writes is not None and writes is not None:
                writes.add(op.writes)
    width = max(len(compare), len(success), len(failure))
    return Txn(b"".join(parts), width, None if writes is None else frozenset(writes))


def nested(members: Sequence[bytes]) -> bytes:
    """The serialized ``TxnRequest`` whose success branch runs each of ``members`` (serialized
    ``TxnRequest``s) as a nested transaction, in order (etcd 3.3 and later): what
    ``TxnRequest(success=[RequestOp(request_txn=m) ...])`` serializes to, without copying each
    member into a new message and serializing it all again (a tenth of a hub's time in the
    etcd client during a failover's take-overs went to those copies). The batcher
    (``batches``) sends the transactions that wait together this way."""
    return b"".join(_SUCCESS.field(_REQUEST_TXN.field(m)) for m in members)
