"""Typed accessors for a resource's raw JSON, raising ``SpecError`` with the field's path.

The API server has already checked types against the CRD schema; these accessors exist for
objects that did not pass through it and so that mypy knows what each field holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from hedwig.errors import MetadataError
from hedwig.metadata import ReplicationConfig


class SpecError(ValueError):
    """A spec the operator cannot act on; the message names the field."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


Raw = Mapping[str, Any]
E = TypeVar("E", bound=Enum)


def section(raw: Raw, key: str, path: str) -> Raw:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{path}.{key}", "must be an object")
    return value


def opt_str(raw: Raw, key: str, path: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpecError(f"{path}.{key}", "must be a string")
    return value


def req_str(raw: Raw, key: str, path: str) -> str:
    value = opt_str(raw, key, path)
    if not value:
        raise SpecError(f"{path}.{key}", "is required")
    return value


def opt_int(raw: Raw, key: str, path: str, *, minimum: int | None = None) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{path}.{key}", "must be an integer")
    if minimum is not None and value < minimum:
        raise SpecError(f"{path}.{key}", f"must be at least {minimum}, got {value}")
    return value


def int_or(raw: Raw, key: str, path: str, default: int, *, minimum: int | None = None) -> int:
    value = opt_int(raw, key, path, minimum=minimum)
    return default if value is None else value


def float_or(raw: Raw, key: str, path: str, default: float, *, minimum: float = 0.0) -> float:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{path}.{key}", "must be a number")
    if value < minimum:
        raise SpecError(f"{path}.{key}", f"must be at least {minimum}, got {value}")
    return float(value)


def enum_or(raw: Raw, key: str, path: str, default: E, problem: str) -> E:
    """The member of ``default``'s enumeration whose value ``key`` holds (``default`` if it is
    absent or empty); ``problem`` says what else it may hold."""
    value = opt_str(raw, key, path) or default.value
    try:
        return type(default)(value)
    except ValueError as exc:
        raise SpecError(f"{path}.{key}", problem) from exc


def bool_or(raw: Raw, key: str, path: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(f"{path}.{key}", "must be true or false")
    return value


def replication(raw: Raw, key: str, path: str) -> ReplicationConfig | None:
    """``{ensemble, writeQuorum, ackQuorum}`` as the core's record, or None if absent."""
    rep = raw.get(key)
    if rep is None:
        return None
    if not isinstance(rep, Mapping):
        raise SpecError(f"{path}.{key}", "must be an object")
    where = f"{path}.{key}"
    try:
        return ReplicationConfig(
            ensemble=int_or(rep, "ensemble", where, 0),
            write_quorum=int_or(rep, "writeQuorum", where, 0),
            ack_quorum=int_or(rep, "ackQuorum", where, 0),
        )
    except MetadataError as exc:
        raise SpecError(where, "needs ackQuorum <= writeQuorum <= ensemble, all >= 1") from exc
