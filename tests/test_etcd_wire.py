"""etcd's transactions written as bytes (``hedwig.metadata.etcd.wire``) are exactly what
protobuf makes of the same messages (etcd itself runs them in ``tests/test_metadata_etcd.py``),
and say which keys they write."""

from __future__ import annotations

from aetcd import rpc  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st

from hedwig.metadata.etcd import wire

keys = st.binary(max_size=300)
revisions = st.integers(0, 2**63 - 1)


@given(keys, st.binary(max_size=3000), revisions)
def test_an_operation_is_protobufs_request_op(key: bytes, value: bytes, lease: int) -> None:
    assert (
        wire.put(key, value, lease).raw
        == rpc.RequestOp(
            request_put=rpc.PutRequest(key=key, value=value, lease=lease)
        ).SerializeToString()
    )
    assert (
        wire.get(key).raw
        == rpc.RequestOp(request_range=rpc.RangeRequest(key=key)).SerializeToString()
    )
    assert (
        wire.delete(key, value).raw
        == rpc.RequestOp(
            request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=value)
        ).SerializeToString()
    )


@given(keys, revisions)
def test_a_comparison_is_protobufs_compare(key: bytes, mod: int) -> None:
    create = {"target": rpc.Compare.CREATE, "create_revision": 0}
    assert (
        wire.exists(key)
        == rpc.Compare(key=key, result=rpc.Compare.GREATER, **create).SerializeToString()
    )
    assert (
        wire.missing(key)
        == rpc.Compare(key=key, result=rpc.Compare.EQUAL, **create).SerializeToString()
    )
    assert (
        wire.modified_at(key, mod)
        == rpc.Compare(
            key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=mod
        ).SerializeToString()
    )


_COMPARES = {"exists": wire.exists, "missing": wire.missing}
_OPS = {"put": lambda k: wire.put(k, b"v" * len(k), 7), "get": wire.get, "delete": wire.delete}
parts = st.tuples(st.sampled_from(sorted(_OPS)), st.binary(min_size=1, max_size=40))


@given(
    st.lists(st.tuples(st.sampled_from(sorted(_COMPARES)), keys), max_size=5),
    st.lists(parts, max_size=6),
    st.lists(parts, max_size=6),
)
def test_a_transaction_is_protobufs_and_knows_what_it_writes(
    compare: list[tuple[str, bytes]],
    success: list[tuple[str, bytes]],
    failure: list[tuple[str, bytes]],
) -> None:
    comparisons = [_COMPARES[kind](key) for kind, key in compare]
    then = [_OPS[kind](key) for kind, key in success]
    otherwise = [_OPS[kind](key) for kind, key in failure]
    txn = wire.txn(comparisons, then, otherwise)
    expected = rpc.TxnRequest(
        compare=[rpc.Compare.FromString(c) for c in comparisons],
        success=[rpc.RequestOp.FromString(op.raw) for op in then],
        failure=[rpc.RequestOp.FromString(op.raw) for op in otherwise],
    )
    assert txn.raw == expected.SerializeToString()
    assert txn.width == max(len(compare), len(success), len(failure))
    written = {key for kind, key in (*success, *failure) if kind in ("put", "delete")}
    assert txn.writes == frozenset(written)
    assert [op.reads for op in then] == [kind == "get" for kind, _ in success]


def test_a_range_delete_makes_its_transaction_go_alone() -> None:
    """etcd refuses a request that writes one key twice; a range's keys are not known, so a
    transaction deleting one is never batched with others (``batches``)."""
    assert wire.txn([], [wire.delete(b"a/", b"a0")]).writes is None
    assert wire.txn([], [wire.delete(b"a/")]).writes == frozenset({b"a/"})


@given(st.integers(1, 2**63 - 1))
def test_a_varint_is_protobufs(n: int) -> None:
    # LeaseGrantRequest.ID: field 2, a varint (key 0x10).
    assert b"\x10" + wire.varint(n) == rpc.LeaseGrantRequest(ID=n).SerializeToString()
