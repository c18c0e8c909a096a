"""The one parser of settings: flags, then ``HEDWIG_*`` variables, then the defaults.

Everything here works from a root's declarations (``hedwig.settings.declaration``), so the
hub's flags (``hedwig hub --help``), the variables it reads, the client commands' shared
options and the ConfigMap the operator writes all come from one list:

- ``add_flags`` puts every setting on an ``argparse`` parser as its flag (and its aliases);
  a number's flag is converted by argparse with ``int`` or ``float``, as its variable is, the
  others keep their text for ``load`` to parse as it parses the variables.
- ``load`` builds the root: a value given (a flag, or a keyword in code) wins over the
  environment, which wins over the default; ``None`` given means "not given".
- ``environment`` and ``command_line`` are the other way: values named by setting, as the
  variables or the flags ``load`` reads back (the operator's ConfigMap, the development
  cluster's hub processes).
- ``changed`` replaces settings by name in a root already built.
- ``lookup`` and ``from_environment`` serve a command that shares one setting (the metadata
  URL, the region) with a default of its own.

The standard library's ``argparse`` and ``os.environ`` suffice: pydantic-settings (not a
dependency) would bring pydantic and its compiled core for a parser of five scalar kinds, and
its models are not the frozen, slotted dataclasses the rest of Hedwig passes around.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from hedwig.errors import UsageError
from hedwig.settings.declaration import Declared, declarations, groups

T = TypeVar("T")


def lookup(root: type, name: str) -> Declared:
    """One setting of ``root``, by name."""
    for declared in declarations(root):
        if declared.name == name:
            return declared
    raise UsageError(f"{root.__name__} has no setting {name!r}")


def from_environment(declared: Declared, environ: Mapping[str, str] | None = None) -> str | None:
    """The setting's text in the environment: its variable, else the first alias set."""
    env = os.environ if environ is None else environ
    for name in declared.envs:
        raw = env.get(name)
        if raw is not None:
            return raw
    return None


def help_text(declared: Declared, default: object = None) -> str:
    shown = declared.default if default is None else default
    text = declared.kind.render(shown) if shown is not None else "none"
    aliases = (
        f", or {', '.join(declared.setting.env_aliases)}" if declared.setting.env_aliases else ""
    )
    return f"{declared.setting.doc} (env {declared.env}{aliases}; default {text})"


def add_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    declared: Declared,
    **options: Any,
) -> None:
    """One setting as a flag (``dest`` its name); ``options`` override argparse's defaults."""
    options.setdefault("help", help_text(declared))
    if declared.kind.is_bool:
        options.setdefault("action", argparse.BooleanOptionalAction)
    else:
        options.setdefault("choices", declared.kind.choices)
        if declared.kind.base in (int, float):
            options.setdefault("type", declared.kind.base)
        if options["choices"] is None:
            options.setdefault("metavar", declared.name.removesuffix("_s").upper())
    parser.add_argument(*declared.flags, dest=declared.name, **options)


def add_flags(parser: argparse.ArgumentParser, root: type) -> None:
    """Every setting of ``root`` as a flag, one argument group per settings group."""
    by_group: dict[str, argparse._ArgumentGroup] = {}
    for declared in declarations(root):
        group = by_group.get(declared.group)
        if group is None:
            title = declared.group or root.__name__
            group = by_group[declared.group] = parser.add_argument_group(title)
        add_flag(group, declared)


def given_flags(args: argparse.Namespace, root: type) -> dict[str, object]:
    """The settings a command line gave (``add_flags``'s destinations), by name."""
    return {d.name: getattr(args, d.name, None) for d in declarations(root)}


def load(root: type[T], environ: Mapping[str, str] | None = None, /, **given: object) -> T:
    """``root`` from ``given`` (non-None), then the environment, then the defaults."""
    env = os.environ if environ is None else environ
    shape: type = root
    declared = {d.name: d for d in declarations(shape)}
    unknown = set(given) - set(declared)
    if unknown:
        raise UsageError(f"{root.__name__} has no settings {sorted(unknown)}")
    values: dict[str, dict[str, object]] = {}
    for name, d in declared.items():
        value = given.get(name)
        if isinstance(value, str) and d.kind.base is not str:
            value = d.parse(value, d.flag)
        if value is None:
            raw = from_environment(d, env)
            if raw is None:
                continue
            source = next(n for n in d.envs if n in env)
            value = d.parse(raw, source)
        values.setdefault(d.group, {})[name] = value
    built: dict[str, object] = dict(values.pop("", {}))
    built.update({name: group(**values.get(name, {})) for name, group in groups(shape)})
    return root(**built)


def changed(config: T, **values: object) -> T:
    """``config`` with some settings (by name) replaced, each group checked again."""
    shape: type = type(config)
    declared = {d.name: d for d in declarations(shape)}
    by_group: dict[str, dict[str, object]] = {}
    for name, value in values.items():
        if name not in declared:
            raise UsageError(f"{type(config).__name__} has no setting {name!r}")
        by_group.setdefault(declared[name].group, {})[name] = value
    replaced: dict[str, object] = dict(by_group.pop("", {}))
    replaced.update(
        {
            group: dataclasses.replace(getattr(config, group), **given)
            for group, given in by_group.items()
        }
    )
    return dataclasses.replace(config, **replaced)  # type: ignore[type-var]


def command_line(root: type, **values: object) -> list[str]:
    """The flags that ``load(root, ...)`` reads back as ``values`` (settings by name; ``None``
    left out), for a program that starts another (the development cluster's hubs)."""
    declared = {d.name: d for d in declarations(root)}
    argv: list[str] = []
    for name, value in values.items():
        if name not in declared:
            raise UsageError(f"{root.__name__} has no setting {name!r}")
        d = declared[name]
        if value is None:
            continue
        if d.kind.is_bool:
            argv.append(d.flag if value else "--no-" + d.flag.removeprefix("--"))
        else:
            argv += [d.flag, d.kind.render(value)]
    return argv


def environment(root: type, **values: object) -> dict[str, str]:
    """The variables that ``load(root, ...)`` reads back as ``values`` (settings by name)."""
    declared = {d.name: d for d in declarations(root)}
    unknown = set(values) - set(declared)
    if unknown:
        raise UsageError(f"{root.__name__} has no settings {sorted(unknown)}")
    return {declared[name].env: declared[name].kind.render(v) for name, v in values.items()}
