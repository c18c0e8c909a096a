"""A setting declared once: its flag, its environment variable, its type and its default.

A group of settings is a frozen, slotted dataclass; each of its fields made with ``setting``
carries a ``Setting`` in its metadata: the sentence ``--help`` and ``docs/operations.md``
show, the flag and the ``HEDWIG_*`` variable (derived from the field's name unless given:
``--name`` without a trailing ``_s``, ``HEDWIG_NAME``), and the older names kept as aliases.
The type is the field's annotation, resolved with ``typing.get_type_hints`` (never read from
its text), and must be one the ``Kind`` table below knows: ``bool``, ``int``, ``float``,
``str``, an ``Enum`` of strings, each optionally ``| None``.

Rules:

- A root holds its settings in groups (fields whose type is a dataclass), or as fields of its
  own (a small root, such as the operator's).
- A field made without ``setting`` is set in code, never from flags or the environment (a
  policy's tuning, such as the rebalancer's).
- Text becomes a value by the field's ``Kind`` alone; an empty text is ``None`` when the
  field allows it; a text that does not parse raises ``UsageError`` naming where it came from.
- A value becomes text (what the operator writes into a ConfigMap) so that parsing it gives
  the value back: ``render`` is ``parse``'s inverse.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hedwig.errors import UsageError

ENV_PREFIX = "HEDWIG_"


@dataclass(frozen=True, slots=True)
class Setting:
    """How one field is set from outside: its sentence, its flag and variable, their aliases."""

    doc: str
    flag: str | None = None
    env: str | None = None
    # Older names, still read (flags and variables of the same setting).
    flag_aliases: tuple[str, ...] = ()
    env_aliases: tuple[str, ...] = ()


def setting(
    default: Any,
    doc: str,
    *,
    flag: str | None = None,
    env: str | None = None,
    flag_aliases: tuple[str, ...] = (),
    env_aliases: tuple[str, ...] = (),
) -> Any:
    """A field settable by flag and variable, with the sentence ``--help`` shows."""
    declared = Setting(doc, flag, env, flag_aliases, env_aliases)
    return field(default=default, metadata={"setting": declared})


@dataclass(frozen=True, slots=True)
class Kind:
    """How a field's text becomes its value, and back."""

    base: type
    optional: bool

    def parse(self, raw: str) -> object:
        if raw == "" and self.optional:
            return None
        return _PARSERS.get(self.base, self.base)(raw)

    def render(self, value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, enum.Enum):
            return str(value.value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return str(int(value)) if value.is_integer() else repr(value)
        return str(value)

    @property
    def is_bool(self) -> bool:
        return self.base is bool

    @property
    def choices(self) -> list[str] | None:
        if issubclass(self.base, enum.Enum):
            return [str(m.value) for m in self.base]
        return None


def _parse_bool(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


_PARSERS: dict[type, Callable[[str], object]] = {
    bool: _parse_bool,
    int: int,
    float: float,
    str: str,
}


def kind_of(annotation: object) -> Kind:
    """The ``Kind`` of a resolved annotation; ``TypeError`` for one no setting may have."""
    optional = False
    if isinstance(annotation, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            raise TypeError(f"a setting has one type (or it and None), not {annotation}")
        annotation = args[0]
    if not isinstance(annotation, type) or not (
        annotation in _PARSERS or issubclass(annotation, enum.Enum)
    ):
        raise TypeError(f"no setting may be of type {annotation}")
    return Kind(annotation, optional)


@dataclass(frozen=True, slots=True)
class Declared:
    """One setting of a root's groups: where it lives, how it is named, its kind and default."""

    group: str  # the root's field holding the group ("": a field of the root itself)
    name: str  # the group's field, unique among all the root's settings
    setting: Setting
    kind: Kind
    default: object

    @property
    def flag(self) -> str:
        return self.setting.flag or "--" + self.name.removesuffix("_s").replace("_", "-")

    @property
    def env(self) -> str:
        return self.setting.env or ENV_PREFIX + self.name.upper()

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.flag, *self.setting.flag_aliases)

    @property
    def envs(self) -> tuple[str, ...]:
        return (self.env, *self.setting.env_aliases)

    def parse(self, raw: str, source: str) -> object:
        """``raw`` as this setting's value; ``UsageError`` naming ``source`` if it is not one."""
        try:
            return self.kind.parse(raw)
        except ValueError as exc:
            raise UsageError(f"{source}={raw!r}: {exc}") from exc


@functools.cache
def groups(root: type) -> tuple[tuple[str, type], ...]:
    """The root's groups: each field whose type is a dataclass, by field name."""
    hints = typing.get_type_hints(root)
    return tuple(
        (f.name, hints[f.name])
        for f in dataclasses.fields(root)
        if isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name])
    )


@functools.cache
def declarations(root: type) -> tuple[Declared, ...]:
    """Every setting of the root (its own fields first, group ``""``) and of its groups, in
    declaration order; names must be unique. Worked out once per root (resolving the
    annotations takes milliseconds; the operator writes a pool's ConfigMap every refresh)."""
    found: list[Declared] = list(_declared_fields(root, ""))
    for group_name, group in groups(root):
        found += _declared_fields(group, group_name)
    names = [d.name for d in found]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        raise TypeError(f"settings named twice in {root.__name__}: {sorted(duplicated)}")
    return tuple(found)


def _declared_fields(cls: type, group: str) -> Iterator[Declared]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        declared = f.metadata.get("setting")
        if isinstance(declared, Setting):  # else set in code
            yield Declared(group, f.name, declared, kind_of(hints[f.name]), f.default)
