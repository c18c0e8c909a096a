"""A batch of etcd transactions is built from its members' bytes: those bytes must be exactly
the nested transaction etcd's protocol defines (etcd itself runs them in
``tests/test_metadata_etcd.py``)."""

from __future__ import annotations

from aetcd import rpc  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st

from hedwig.metadata.etcd import wire
from hedwig.metadata.etcd.wire import nested


def member(key: bytes, value: bytes, version: int) -> bytes:
    compare = rpc.Compare(
        key=key, result=rpc.Compare.CompareResult.EQUAL, target=rpc.Compare.VERSION, version=version
    )
    return bytes(
        rpc.TxnRequest(
            compare=[compare],
            success=[rpc.RequestOp.FromString(wire.put(key, value, 7).raw)],
            failure=[rpc.RequestOp.FromString(wire.get(key).raw)],
        ).SerializeToString()
    )


@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=300), st.binary(max_size=3000), st.integers(0, 9)),
        min_size=1,
        max_size=40,
    )
)
def test_a_batch_is_the_nested_transaction_of_its_members(
    members: list[tuple[bytes, bytes, int]],
) -> None:
    raws = [member(*m) for m in members]
    expected = rpc.TxnRequest(
        success=[rpc.RequestOp(request_txn=rpc.TxnRequest.FromString(r)) for r in raws]
    )
    assert nested(raws) == expected.SerializeToString()
    parsed = rpc.TxnRequest.FromString(nested(raws))
    assert [op.request_txn.SerializeToString() for op in parsed.success] == raws
