"""The records' JSON: compact, keys sorted, read and written by ``msgspec``.

JSON rather than a binary format because operators read these records with ``zkCli.sh`` (or
``etcdctl``) when things go wrong; the records are small and off the publish path.
``docs/zookeeper-layout.md`` shows examples.

The JSON is read and written by ``msgspec`` rather than the standard library: a take-over
reads a ledger's metadata and writes three, and a survivor of a failover does thousands a
second. ``msgspec`` decodes a ledger's metadata straight into the record, types checked (a
field of the wrong type is a corrupt record, said so), in a seventh of the time ``json`` and
building the record took (8 µs: a twentieth of a survivor's failover), and writes it in a
third of the time; keys sorted and compact as before. Strings are written as UTF-8 where
``json`` escaped what is not ASCII: both read either.

Records that are ``msgspec`` structs are decoded straight into their type (``decode_as``) and
encoded by ``ENCODER``; the others go through a plain object (``load_object``,
``dump_object``), built and checked by their own ``from_json``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from hedwig.errors import MetadataError

T = TypeVar("T")

_DECODER = msgspec.json.Decoder()  # untyped: objects as dicts, arrays as lists
# Keys sorted, no spaces: the bytes ``json.dumps(..., separators=(",", ":"), sort_keys=True)``
# made, but for strings with characters past ASCII (UTF-8 here, escaped there).
ENCODER = msgspec.json.Encoder(order="sorted")


def load_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = _DECODER.decode(raw) if raw else {}
    except msgspec.DecodeError as exc:
        raise MetadataError(f"corrupt {what} record: {exc}") from exc
    if not isinstance(data, dict):
        raise MetadataError(f"corrupt {what} record: not an object")
    return data


def dump_object(data: dict[str, Any]) -> bytes:
    return ENCODER.encode(data)


def decode_as(decoder: msgspec.json.Decoder[T], raw: bytes, what: str) -> T:
    """``raw`` read as a record of ``decoder``'s type, checked as it is read (nothing at all
    reads as an empty object, as ``load_object`` has it)."""
    try:
        return decoder.decode(raw or b"{}")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MetadataError(f"corrupt {what}: {exc}") from exc
