"""Names on the wire: topics and subscribers (and how they become znode names), lanes, and a
publisher's identities.

Rules:
- A name is 1 to 255 UTF-8 bytes of printable characters (``str.isprintable``: no control
  characters, no line breaks, no unassigned or private-use surrogates). Anything else is refused
  with ``InvalidTopicError`` before it reaches the store, so a hub never creates a znode for it.
- Every name maps to exactly one znode name and back. Characters outside ``[A-Za-z0-9._~-]``
  are percent-encoded as their UTF-8 bytes (``a/b`` becomes ``a%2Fb``), so no name can add a
  path segment. The names ``.`` and ``..`` have their dots encoded too, because ZooKeeper
  rejects them as node names.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from hedwig.errors import InvalidRequestError, InvalidTopicError

MAX_NAME_BYTES = 255
_SAFE = "._~-"
# A name needing no encoding, checked in one regular-expression match: ``quote`` costs ten times
# that, and a hub encodes a topic's name for every store request about it.
_PLAIN = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._~-]{1,255}")
# ...or only slashes besides (``region/cell-12``, the commonest other kind): each becomes
# ``%2F`` as ``quote`` would make it, and the name, holding one, is neither ``.`` nor ``..``.
_SLASHED = re.compile(r"[A-Za-z0-9._~/-]{1,255}")


def validate_name(name: str, *, what: str = "topic") -> str:
    """Return ``name`` unchanged if it is acceptable, otherwise raise ``InvalidTopicError``."""
    if not isinstance(name, str):
        raise InvalidTopicError.for_name(repr(name), f"{what} name must be a string")
    if not name:
        raise InvalidTopicError.for_name(name, f"{what} name is empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidTopicError.for_name(name, f"{what} name is not valid unicode") from exc
    if size > MAX_NAME_BYTES:
        raise InvalidTopicError.for_name(
            name[:32] + "...", f"{what} name is {size} bytes, the limit is {MAX_NAME_BYTES}"
        )
    if not name.isprintable():
        raise InvalidTopicError.for_name(name, f"{what} name holds a non-printable character")
    return name


def encode_name(name: str) -> str:
    """The znode name for a valid topic or subscriber name."""
    if isinstance(name, str) and _PLAIN.fullmatch(name):
        return name  # ASCII, printable, at most 255 bytes, not "." or "..": valid and unchanged
    if isinstance(name, str) and "/" in name and _SLASHED.fullmatch(name):
        return name.replace("/", "%2F")
    encoded = quote(validate_name(name), safe=_SAFE)
    if encoded in (".", ".."):
        return encoded.replace(".", "%2E")
    # The name itself when unchanged: a hub keeps it anyway, and a record filed by the znode
    # name (the ZooKeeper client's of owner watches) then shares it.
    return name if encoded == name else encoded


def decode_name(znode: str) -> str:
    """The topic or subscriber name stored under a znode name made by ``encode_name``."""
    return unquote(znode, errors="strict")


# Lanes (``hedwig.metadata.plans``): lane 0 of a topic is the topic itself; lane ``i`` is a topic
# of its own, named after it. The suffix is reserved: a hub serves such a name only as a lane
# its topic's plan lists.
LANE_SUFFIX = "~lane"
MAX_LANE = 9999


def lane_name(topic: str, index: int) -> str:
    """The topic that holds lane ``index`` of ``topic``."""
    if index == 0:
        return topic
    if not 0 < index <= MAX_LANE:
        raise InvalidTopicError.for_name(topic, f"lane {index} is out of range")
    return validate_name(f"{topic}{LANE_SUFFIX}{index}")


def lane_of(name: str) -> tuple[str, int]:
    """``(topic, lane)`` for a lane's name; ``(name, 0)`` for any other name."""
    head, sep, tail = name.rpartition(LANE_SUFFIX)
    if sep and head and tail.isdigit() and tail.isascii() and tail[0] != "0":
        index = int(tail)
        if index <= MAX_LANE:
            return head, index
    return name, 0


# A publisher id starting with this is a message replicated from another region
# (``hedwig.hub.replicating.applying``: ``@<region>/<origin publisher>``). Only a hub's replicator
# writes such ids; a client's publish under one is refused, or a client could forge a message
# as another region's, or make the replicator skip real ones.
ORIGIN_MARK = "@"


def check_client_publisher_id(publisher_id: str) -> None:
    """``InvalidRequestError`` for a publisher id a client may not publish under."""
    if publisher_id.startswith(ORIGIN_MARK):
        raise InvalidRequestError(
            f"publisher id {publisher_id!r} starts with {ORIGIN_MARK!r}: such ids are kept for "
            "messages replicated from another region"
        )


# A publisher's identities (``hedwig.client.publishing``): the id it was given, then that id with
# an epoch suffix, ``~1``, ``~2``..., each time it starts afresh (after a batch failed for good,
# or on changing lanes). Lanes are chosen by the id without the suffix, so every identity of one
# publisher belongs to the same lane (``hedwig.metadata.plans``).
EPOCH_SEPARATOR = "~"


def publisher_identity(base: str, epoch: int) -> str:
    """The id a publisher given ``base`` goes by in its ``epoch`` (0: ``base`` itself)."""
    return f"{base}{EPOCH_SEPARATOR}{epoch}" if epoch else base


def publisher_base(publisher: str) -> str:
    """The publisher id a client was given, without the epoch suffix it adds when it starts a
    fresh identity (after a failure, or on changing lanes): every identity of one publisher
    belongs to the same lane."""
    head, sep, tail = publisher.rpartition(EPOCH_SEPARATOR)
    return head if sep and head and tail.isdigit() and tail.isascii() else publisher


# Tenants and namespaces: a topic named ``tenant/namespace/rest`` belongs to namespace
# ``namespace`` of tenant ``tenant`` when both are 1 to 63 characters of ``[A-Za-z0-9._-]``
# (neither ``.`` nor ``..``) and ``rest`` is not empty. Any other name (no slash, one slash as in
# ``region/cell-12``, or segments outside that alphabet) belongs to ``DEFAULT_TENANT`` /
# ``DEFAULT_NAMESPACE``, so every name valid before stays valid and means what it meant. The
# name itself is unchanged on the wire and in the stores (``encode_name`` encodes it whole:
# ``acme/web/clicks`` is the znode or key ``acme%2Fweb%2Fclicks``), so no layout changes.
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
_SEGMENT = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._-]{1,63}")


def namespace_of(topic: str) -> tuple[str, str]:
    """``(tenant, namespace)`` of a topic name (the defaults for a name without the prefix)."""
    parts = topic.split("/", 2)
    if len(parts) == 3 and parts[2] and all(_SEGMENT.fullmatch(p) for p in parts[:2]):
        return parts[0], parts[1]
    return DEFAULT_TENANT, DEFAULT_NAMESPACE


def namespace_name(tenant: str, namespace: str) -> str:
    """``tenant/namespace``, both checked as ``namespace_of`` reads them (``InvalidTopicError``
    otherwise): the name a namespace's records are kept under."""
    for what, part in (("tenant", tenant), ("namespace", namespace)):
        if not isinstance(part, str) or not _SEGMENT.fullmatch(part):
            raise InvalidTopicError.for_name(
                repr(part), f"{what} name must be 1 to 63 of [A-Za-z0-9._-], not . or .."
            )
    return f"{tenant}/{namespace}"
