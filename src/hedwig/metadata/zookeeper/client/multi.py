"""``multi`` and ``multiRead``: many operations in one request.

Neither is a plain jute record: a request is a sequence of operations, each behind a
``MultiHeader`` (its operation code, ``done`` false, -1), ended by a header marked done; the
answer is the same with one result per operation, a result's header naming what it holds
(a failed operation's is ``OpCode.ERROR``, holding its code). These codecs have the records'
interface (``encode_into``, ``read``), so ``multi`` and ``multiRead`` go through the
connection as any request does. Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from hedwig.errors import ProtocolError
from hedwig.metadata.zookeeper.client.codes import OpCode
from hedwig.metadata.zookeeper.client.jute import JuteRecord
from hedwig.metadata.zookeeper.client.records import (
    CheckResult,
    CheckVersionRequest,
    Create2Request,
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
    Request,
    SetDataRequest,
    StatResponse,
)

WriteOp = CreateRequest | DeleteRequest | SetDataRequest | CheckVersionRequest
ReadOp = GetDataRequest | GetChildrenRequest
OpResult = (
    CreateResponse
    | Create2Response
    | DeleteResult
    | StatResponse
    | CheckResult
    | GetDataResponse
    | GetChildrenResponse
    | ErrorResult
)

_HEADER = struct.Struct(">iBi")
_END = _HEADER.pack(-1, 1, -1)
# What each operation of a multi's or multiRead's answer carries, by the type in its header
# (a set's answer is the stat alone: ``StatResponse``, the same bytes).
_RESULT_TYPES: dict[type[JuteRecord], OpCode] = {
    CreateResponse: OpCode.CREATE,
    Create2Response: OpCode.CREATE2,
    DeleteResult: OpCode.DELETE,
    StatResponse: OpCode.SET_DATA,
    CheckResult: OpCode.CHECK,
    GetDataResponse: OpCode.GET_DATA,
    GetChildrenResponse: OpCode.GET_CHILDREN,
    ErrorResult: OpCode.ERROR,
}
_RESULTS: dict[int, Callable[[bytes, int], tuple[OpResult, int]]] = {
    kind: result.read  # type: ignore[misc]
    for result, kind in _RESULT_TYPES.items()
}
_OPS: dict[int, Callable[[bytes, int], tuple[Request, int]]] = {
    OpCode.CREATE: CreateRequest.read,
    OpCode.CREATE2: Create2Request.read,
    OpCode.DELETE: DeleteRequest.read,
    OpCode.SET_DATA: SetDataRequest.read,
    OpCode.CHECK: CheckVersionRequest.read,
    OpCode.GET_DATA: GetDataRequest.read,
    OpCode.GET_CHILDREN: GetChildrenRequest.read,
}


def _put_ops(out: bytearray, ops: Sequence[Request]) -> None:
    for op in ops:
        out += _HEADER.pack(op.OPCODE, 0, -1)
        op.encode_into(out)
    out += _END


def _read_ops(data: bytes, pos: int) -> tuple[tuple[Request, ...], int]:
    ops: list[Request] = []
    while True:
        kind, done, _ = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        if done:
            return tuple(ops), pos
        read = _OPS.get(kind)
        if read is None:
            raise ProtocolError(f"a multi holding an operation of type {kind}")
        op, pos = read(data, pos)
        ops.append(op)


def _read_results(data: bytes, pos: int) -> tuple[tuple[OpResult, ...], int]:
    results: list[OpResult] = []
    while True:
        kind, done, _ = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        if done:
            return tuple(results), pos
        read = _RESULTS.get(kind)
        if read is None:
            raise ProtocolError(f"a multi answered with an operation of type {kind}")
        result, pos = read(data, pos)
        results.append(result)


@dataclass(frozen=True, slots=True)
class MultiResponse(JuteRecord):
    """The answer to a ``multi`` or a ``multiRead``: one result per operation, in order. A
    failed ``multi`` has an ``ErrorResult`` for each: the failed one's own code, 0 for those
    before it (rolled back) and -2 for those after it (not tried)."""

    results: tuple[OpResult, ...]

    def encode_into(self, out: bytearray) -> None:
        for result in self.results:
            err = result.err if isinstance(result, ErrorResult) else 0
            out += _HEADER.pack(_RESULT_TYPES[type(result)], 0, err)
            result.encode_into(out)
        out += _END

    @classmethod
    def read(cls, data: bytes, pos: int) -> tuple[MultiResponse, int]:
        results, pos = _read_results(data, pos)
        return cls(results), pos


@dataclass(frozen=True, slots=True)
class MultiRequest(Request):
    """Write operations that all take effect or none does."""

    ops: tuple[WriteOp, ...]
    OPCODE: ClassVar[OpCode] = OpCode.MULTI
    RESPONSE: ClassVar[type[JuteRecord]] = MultiResponse

    def encode_into(self, out: bytearray) -> None:
        _put_ops(out, self.ops)

    @classmethod
    def read(cls, data: bytes, pos: int) -> tuple[MultiRequest, int]:
        ops, pos = _read_ops(data, pos)
        return cls(ops), pos  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MultiReadRequest(Request):
    """Reads of many znodes in one request, each answered on its own (not atomic)."""

    ops: tuple[ReadOp, ...]
    OPCODE: ClassVar[OpCode] = OpCode.MULTI_READ
    RESPONSE: ClassVar[type[JuteRecord]] = MultiResponse

    def encode_into(self, out: bytearray) -> None:
        _put_ops(out, self.ops)

    @classmethod
    def read(cls, data: bytes, pos: int) -> tuple[MultiReadRequest, int]:
        ops, pos = _read_ops(data, pos)
        return cls(ops), pos  # type: ignore[arg-type]
