"""A stored record's version, for compare-and-set: every write names the version it expects.

``Versioned`` pairs a record with the version it was read at; a write expecting another fails
with ``BadVersionError``. Two versions are not versions of a record but instructions:
``NEW_VERSION`` creates a record that must not exist yet, ``ANY_VERSION`` overwrites or deletes
whatever is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NewType, TypeVar

Version = NewType("Version", int)
# Passed as the expected version to create a record that must not exist yet.
NEW_VERSION = Version(-1)
# Passed as the expected version to overwrite or delete whatever is stored.
ANY_VERSION = Version(-2)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    value: T
    version: Version
