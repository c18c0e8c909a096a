"""Where each record lives in etcd, and the conditional writes every manager uses.

Names are encoded as in ZooKeeper (``hedwig.protocol.names``): ``a/b`` is ``a%2Fb``, so a name
never reaches into another key or family. Each conditional write is one transaction comparing
the key's mod revision (the record's ``Version``) or its absence, which reads the key back when
the comparison fails: the caller learns whether the record changed or is gone.
"""

from __future__ import annotations

from hedwig.errors import BadVersionError, MetadataError
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.kv import delete
from hedwig.metadata.etcd.wire import exists, get, missing, modified_at, put
from hedwig.metadata.layout import ROOT
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version
from hedwig.protocol.names import decode_name, encode_name


class Keys:
    """Where each record lives."""

    def __init__(self, region: str, prefix: str = ROOT) -> None:
        self.base = f"{prefix.rstrip('/')}/{encode_name(region)}"

    def _k(self, *parts: str) -> bytes:
        return "/".join((self.base, *parts)).encode()

    def family(self, name: str) -> bytes:
        return self._k(name, "")

    def topic(self, t: str) -> bytes:
        return self._k("topics", encode_name(t))

    def owner(self, t: str) -> bytes:
        return self._k("owners", encode_name(t))

    def persistence(self, t: str) -> bytes:
        return self._k("persistence", encode_name(t))

    def subscribers(self, t: str) -> bytes:
        return self._k("subscribers", encode_name(t), "")

    def subscriber(self, t: str, s: str) -> bytes:
        return self._k("subscribers", encode_name(t), encode_name(s))

    def host(self, address: str) -> bytes:
        return self._k("hosts", encode_name(address))

    def alive(self, address: str) -> bytes:
        return self._k("alive", encode_name(address))

    def ledger(self, ledger_id: int) -> bytes:
        return self._k("ledgers", f"L{ledger_id:010d}")

    @property
    def ledger_ids(self) -> bytes:
        return self._k("ledger-ids")

    def acl(self, name: str) -> bytes:
        return self._k("acls", encode_name(name))

    def plan(self, t: str) -> bytes:
        return self._k("plans", encode_name(t))

    @property
    def bundle_map(self) -> bytes:
        return self._k("bundle-map")

    @property
    def defaults(self) -> bytes:
        return self._k("defaults")

    @staticmethod
    def name_of(key: bytes) -> str:
        return decode_name(key.decode().rsplit("/", 1)[-1])


async def create_key(etcd: EtcdClient, key: bytes, value: bytes, lease: int = 0) -> Version:
    """Create ``key``; ``BadVersionError`` if it exists."""
    res = await etcd.txn([missing(key)], [put(key, value, lease)])
    if not res.succeeded:
        raise BadVersionError.at(key.decode(), NEW_VERSION)
    return Version(res.revision)


async def put_beside_topic(
    etcd: EtcdClient,
    topic: str,
    topic_key: bytes,
    key: bytes,
    value: bytes,
    version: Version,
    lease: int = 0,
) -> Version:
    """Write ``key``, a record of ``topic`` (whose own record is ``topic_key``), only while the
    topic exists: created (``NEW_VERSION``; ``BadVersionError`` if it exists) or written
    whatever is there (``ANY_VERSION``); ``MetadataError`` if the topic does not exist."""
    guards = [exists(topic_key)] if version == ANY_VERSION else [exists(topic_key), missing(key)]
    res = await etcd.txn(guards, [put(key, value, lease)], [get(topic_key)])
    if res.succeeded:
        return Version(res.revision)
    if res.reads[0] is None:
        raise MetadataError(f"topic {topic!r} does not exist")
    raise BadVersionError.at(key.decode(), version)


async def set_key(
    etcd: EtcdClient, key: bytes, value: bytes, version: Version, lease: int = 0
) -> Version:
    """Overwrite ``key`` at ``version`` (or any); ``LookupError`` if it does not exist."""
    guard = exists(key) if version == ANY_VERSION else modified_at(key, int(version))
    res = await etcd.txn([guard], [put(key, value, lease)], [get(key)])
    if res.succeeded:
        return Version(res.revision)
    if res.reads[0] is None:
        raise LookupError(key.decode())
    raise BadVersionError.at(key.decode(), version)


async def delete_key(etcd: EtcdClient, key: bytes, version: Version) -> None:
    """Delete ``key`` at ``version`` (or any); ``LookupError`` if it does not exist."""
    guard = exists(key) if version == ANY_VERSION else modified_at(key, int(version))
    res = await etcd.txn([guard], [delete(key)], [get(key)])
    if res.succeeded:
        return
    if res.reads[0] is None:
        raise LookupError(key.decode())
    raise BadVersionError.at(key.decode(), version)
