"""One way to open a metadata store: from a URL.

Every component (hubs, the CLI, the operator, the Spark source, benchmarks) names its store with
one string, so a deployment switches stores by changing that string and nothing else:

- ``zk://HOST:PORT[,HOST:PORT...]`` or a bare ``HOST:PORT[,...]``: ZooKeeper (the default
  store, and the only one that survives a process restart today);
- ``etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX]``: etcd v3 (``hedwig.metadata.etcd``),
  keys under PREFIX (default ``/hedwig``), owner and alive records bound to the process's lease;
- ``memory://NAME``: the in-process store. Stores opened with the same NAME in one process share
  their data, as hubs sharing one ZooKeeper do; for tests and single-process demos.

How a process reaches a secured etcd (TLS, a client certificate, a user of etcd's own) comes
from ``etcd_access``, else the environment (``EtcdAccess.from_env``): ``HEDWIG_ETCD_DIR``, a
directory as a mounted Kubernetes Secret lays it out (``credentials``, ``ca.crt``, ``tls.crt``,
``tls.key``), and the single variables, which take precedence.

``open_store`` returns the store unstarted; use it as an async context manager (``async with
open_store(url, region=r) as store``), which starts it and closes it, or call ``start`` and
``close`` yourself when its lifetime is not a block (a hub's store lives as long as the hub).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from hedwig.clock import Clock, SystemClock
from hedwig.errors import UsageError
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore

DEFAULT_SESSION_TIMEOUT_S = 6.0

# Named in-process backends: every ``memory://NAME`` store of this process with the same NAME.
_MEMORY_BACKENDS: dict[str, MemoryBackend] = {}


# The files of an etcd access Secret (or directory), and the field each fills.
ETCD_ACCESS_FILES = {
    "credentials": "credentials",
    "ca.crt": "ca",
    "tls.crt": "cert",
    "tls.key": "key",
}


@dataclass(frozen=True)
class EtcdAccess:
    """What a secured etcd asks of its clients. ``credentials``: ``USER:PASSWORD`` of an etcd
    user (give it a role on Hedwig's prefix only); ``ca``: the CA of etcd's certificate (TLS is
    on when it is given); ``cert`` and ``key``: a client certificate, if etcd asks for one."""

    credentials: str | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    # Where ``credentials`` come from, read again at each authentication (a password rotated
    # in a mounted Secret is picked up without a restart): ``async () -> USER:PASSWORD``.
    credentials_source: Callable[[], Awaitable[str | None]] | None = None

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> EtcdAccess:
        """From a Secret's data or a directory's files, by their names (``ETCD_ACCESS_FILES``);
        others are ignored."""
        given: dict[str, object] = {}
        for name, field_name in ETCD_ACCESS_FILES.items():
            value = files.get(name)
            if value:
                given[field_name] = value.decode().strip() if name == "credentials" else value
        return cls(**given)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls) -> EtcdAccess:
        access = cls()
        directory = os.environ.get("HEDWIG_ETCD_DIR")
        if directory:
            files = {}
            for name in ETCD_ACCESS_FILES:
                path = Path(directory) / name
                if path.is_file():
                    files[name] = path.read_bytes()
            access = cls.from_files(files)
            if "credentials" in files:
                access = replace(
                    access, credentials_source=_file_source(Path(directory) / "credentials")
                )
        credentials = _secret("HEDWIG_ETCD_CREDENTIALS")
        if credentials:
            credentials_file = os.environ.get("HEDWIG_ETCD_CREDENTIALS_FILE")
            access = replace(
                access,
                credentials=credentials,
                credentials_source=_file_source(Path(credentials_file))
                if credentials_file
                else None,
            )
        ca, cert, key = (_file("HEDWIG_ETCD_" + n) for n in ("CA", "CERT", "KEY"))
        return replace(
            access,
            ca=ca if ca is not None else access.ca,
            cert=cert if cert is not None else access.cert,
            key=key if key is not None else access.key,
        )


def _file_source(path: Path) -> Callable[[], Awaitable[str | None]]:
    async def read() -> str | None:
        return await asyncio.to_thread(path.read_text)

    return read


def memory_backend(name: str) -> MemoryBackend:
    """The shared in-process backend behind ``memory://NAME`` (created on first use)."""
    backend = _MEMORY_BACKENDS.get(name)
    if backend is None:
        backend = _MEMORY_BACKENDS[name] = MemoryBackend()
    return backend


def open_store(
    url: str,
    *,
    region: str,
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
    digest: str | None = None,
    etcd_access: EtcdAccess | None = None,
    clock: Clock = SystemClock(),  # noqa: B008 (stateless)
) -> MetadataStore:
    """The store ``url`` names, for ``region``; ``UsageError`` if the URL is not understood.

    ``session_timeout_s`` is how long the store keeps this process's ephemeral records (owner
    records, the alive record) after it stops hearing from it: the failover time after a crash.

    ZooKeeper digest credentials (``USER:PASSWORD``; every znode created is then writable by
    that user only, readable by all) come from ``digest``, else the URL
    (``zk://USER:PASSWORD@HOST:PORT``), else the file named by ``HEDWIG_ZK_DIGEST_FILE``, else
    ``HEDWIG_ZK_DIGEST``: hubs, the operator and every command share them without a flag.

    ``clock`` times the store's session (ZooKeeper's pings and timeouts).
    """
    if not url or not url.strip():
        raise UsageError("the metadata store URL is empty (e.g. zk://127.0.0.1:2181)")
    url = url.strip()
    if "://" not in url:
        return _zookeeper(url, region, session_timeout_s, digest or _digest_from_env(), clock)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("zk", "zookeeper"):
        if not parts.netloc:
            raise UsageError(f"{url!r}: a ZooKeeper URL needs HOST:PORT (zk://127.0.0.1:2181)")
        if parts.path not in ("", "/"):
            raise UsageError(f"{url!r}: ZooKeeper URLs take no path; the region is separate")
        hosts = parts.netloc.rpartition("@")[2]
        given = parts.netloc.rpartition("@")[0] or None
        digest = digest or given or _digest_from_env()
        return _zookeeper(hosts, region, session_timeout_s, digest, clock)
    if scheme == "etcd":
        access = etcd_access if etcd_access is not None else EtcdAccess.from_env()
        return _etcd(parts.netloc, parts.path, region, session_timeout_s, url, access, clock)
    if scheme == "memory":
        name = parts.netloc or parts.path.strip("/") or "default"
        return MemoryMetadataStore(memory_backend(name), region)
    raise UsageError(
        f"{url!r}: unknown metadata store {scheme!r} (use zk://, etcd:// or memory://)"
    )


def _digest_from_env() -> str | None:
    path = os.environ.get("HEDWIG_ZK_DIGEST_FILE")
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise UsageError(f"HEDWIG_ZK_DIGEST_FILE={path}: {exc}") from exc
    return os.environ.get("HEDWIG_ZK_DIGEST") or None


def _zookeeper(
    hosts: str, region: str, session_timeout_s: float, digest: str | None, clock: Clock
) -> MetadataStore:
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise UsageError(f"ZooKeeper address {host!r} must be HOST:PORT")
    # Imported here, as etcd's is: a process loads the client of the store it uses only.
    from hedwig.metadata.zookeeper import ZkMetadataStore

    return ZkMetadataStore(
        hosts, region, session_timeout=session_timeout_s, digest=digest, clock=clock
    )


def _etcd(
    netloc: str,
    path: str,
    region: str,
    session_timeout_s: float,
    url: str,
    access: EtcdAccess,
    clock: Clock,
) -> MetadataStore:
    """etcd with the same security approach as ZooKeeper: credentials (``USER:PASSWORD``, for
    etcd's own authentication) from the URL, else ``access``; TLS when ``access`` has the CA
    to trust (and a client certificate, if etcd asks for one)."""
    given, _, hosts = netloc.rpartition("@")
    if not hosts:
        raise UsageError(f"{url!r}: an etcd URL needs HOST:PORT (etcd://127.0.0.1:2379)")
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise UsageError(f"etcd address {host!r} must be HOST:PORT")
    credentials = given or access.credentials
    username = password = None
    if credentials:
        username, sep, password = credentials.partition(":")
        if not sep or not username or not password:
            raise UsageError("etcd credentials are USER:PASSWORD")
    ca, cert, key = access.ca, access.cert, access.key
    if (cert is None) != (key is None):
        raise UsageError("an etcd client certificate and its key go together (tls.crt, tls.key)")
    if cert is not None and ca is None:
        raise UsageError("an etcd client certificate needs the CA of etcd's (ca.crt) for TLS")
    from hedwig.metadata.etcd import EtcdCredentials, EtcdMetadataStore

    # gRPC balances over several addresses itself, given as IPv4 addresses ("ipv4:" takes a
    # list); a DNS name (a Kubernetes Service) resolves to every member on its own.
    target = hosts
    if "," in hosts:
        for host in hosts.split(","):
            try:
                ipaddress.IPv4Address(host.rpartition(":")[0])
            except ValueError as exc:
                raise UsageError(
                    f"{url!r}: several etcd addresses must be IPv4 addresses; name one DNS "
                    "name (a Service) instead"
                ) from exc
        target = "ipv4:" + hosts
    return EtcdMetadataStore(
        target,
        region,
        prefix=path.rstrip("/") or "/hedwig",
        session_timeout=session_timeout_s,
        credentials=EtcdCredentials(
            username=username,
            password=password,
            ca=ca,
            cert=cert,
            key=key,
            source=None if given else access.credentials_source,
        ),
        clock=clock,
    )


async def read_topic_owner(url: str, region: str, topic: str) -> str | None:
    """The address of the hub that owns ``topic`` in ``region`` of the store at ``url`` (None:
    no hub does), read once through a store opened for it (tests, benchmarks, tools)."""
    store = open_store(url, region=region)
    await store.start()
    try:
        got = await store.ownership.read_owner_info(topic)
        return got.value.address if got else None
    finally:
        await store.close()


def _secret(name: str) -> str | None:
    path = os.environ.get(name + "_FILE")
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise UsageError(f"{name}_FILE={path}: {exc}") from exc
    return os.environ.get(name) or None


def _file(name: str) -> bytes | None:
    path = os.environ.get(name)
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{name}={path}: {exc}") from exc
