"""One object for what many per-topic objects of a hub hold alike.

A hub owning 100,000 topics has as many topic logs, ledger writers and owned topics, and
each held its own reference to the hub's store, replicas, clock and callbacks: eight bytes a
reference, most of a hundred bytes an object, the same values in every one. ``shared`` gives
them one object holding those values instead, made once per distinct set (by identity) and
kept for as long as anything refers to it; the objects keep the same constructors.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# By (factory, identities of the parts). An entry lives as long as its object, which holds
# its parts, so no identity in a live key can be reused by another object.
_TABLE: weakref.WeakValueDictionary[tuple[int, ...], Any] = weakref.WeakValueDictionary()


def shared(factory: Callable[..., T], *parts: object) -> T:
    """``factory(*parts)``, or the one made before from the same objects and still alive.
    ``factory`` makes an immutable object that can be weakly referred to."""
    key = (id(factory), *map(id, parts))
    got: T | None = _TABLE.get(key)
    if got is None:
        got = factory(*parts)
        _TABLE[key] = got
    return got
