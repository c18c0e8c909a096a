"""One way to open a metadata store: from a URL.

Every component (hubs, the CLI, the operator, the Spark source, benchmarks) names its store with
one string, so a deployment switches stores by changing that string and nothing else:

- ``zk://HOST:PORT[,HOST:PORT...]`` or a bare ``HOST:PORT[,...]``: ZooKeeper (the default
  store, and the only one that survives a process restart today);
- ``etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX]``: etcd v3 (``hedwig.metadata.etcd``),
  keys under PREFIX (default ``/hedwig``), owner and alive records bound to the process's lease;
- ``memory://NAME``: the in-process store. Stores opened with the same NAME in one process share
  their data, as hubs sharing one ZooKeeper do; for tests and single-process demos.

``open_store`` returns the store unstarted; use it as an async context manager (``async with
open_store(url, region=r) as store``), which starts it and closes it, or call ``start`` and
``close`` yourself when its lifetime is not a block (a hub's store lives as long as the hub).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

from hedwig.errors import UsageError
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore

DEFAULT_SESSION_TIMEOUT_S = 6.0

# Named in-process backends: every ``memory://NAME`` store of this process with the same NAME.
_MEMORY_BACKENDS: dict[str, MemoryBackend] = {}


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
) -> MetadataStore:
    """The store ``url`` names, for ``region``; ``UsageError`` if the URL is not understood.

    ``session_timeout_s`` is how long the store keeps this process's ephemeral records (owner
    records, the alive record) after it stops hearing from it: the failover time after a crash.

    ZooKeeper digest credentials (``USER:PASSWORD``; every znode created is then writable by
    that user only, readable by all) come from ``digest``, else the URL
    (``zk://USER:PASSWORD@HOST:PORT``), else the file named by ``HEDWIG_ZK_DIGEST_FILE``, else
    ``HEDWIG_ZK_DIGEST``: hubs, the operator and every command share them without a flag.
    """
    if not url or not url.strip():
        raise UsageError("the metadata store URL is empty (e.g. zk://127.0.0.1:2181)")
    url = url.strip()
    if "://" not in url:
        return _zookeeper(url, region, session_timeout_s, digest or _digest_from_env())
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("zk", "zookeeper"):
        if not parts.netloc:
            raise UsageError(f"{url!r}: a ZooKeeper URL needs HOST:PORT (zk://127.0.0.1:2181)")
        if parts.path not in ("", "/"):
            raise UsageError(f"{url!r}: ZooKeeper URLs take no path; the region is separate")
        hosts = parts.netloc.rpartition("@")[2]
        given = parts.netloc.rpartition("@")[0] or None
        return _zookeeper(hosts, region, session_timeout_s, digest or given or _digest_from_env())
    if scheme == "etcd":
        return _etcd(parts.netloc, parts.path, region, session_timeout_s, url)
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
    hosts: str, region: str, session_timeout_s: float, digest: str | None
) -> MetadataStore:
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise UsageError(f"ZooKeeper address {host!r} must be HOST:PORT")
    # Imported here: kazoo starts threads only when a ZooKeeper store is actually used.
    from hedwig.metadata.zookeeper import ZkMetadataStore

    return ZkMetadataStore(hosts, region, session_timeout=session_timeout_s, digest=digest)


def _etcd(netloc: str, path: str, region: str, session_timeout_s: float, url: str) -> MetadataStore:
    """etcd with the same security approach as ZooKeeper: credentials (``USER:PASSWORD``, for
    etcd's own authentication) from the URL, else ``HEDWIG_ETCD_CREDENTIALS_FILE``, else
    ``HEDWIG_ETCD_CREDENTIALS``; TLS when ``HEDWIG_ETCD_CA`` names the CA to trust (with
    ``HEDWIG_ETCD_CERT`` and ``HEDWIG_ETCD_KEY`` for a client certificate, if etcd asks)."""
    given, _, hosts = netloc.rpartition("@")
    if not hosts:
        raise UsageError(f"{url!r}: an etcd URL needs HOST:PORT (etcd://127.0.0.1:2379)")
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise UsageError(f"etcd address {host!r} must be HOST:PORT")
    credentials = given or _secret("HEDWIG_ETCD_CREDENTIALS")
    username = password = None
    if credentials:
        username, sep, password = credentials.partition(":")
        if not sep or not username or not password:
            raise UsageError("etcd credentials are USER:PASSWORD")
    ca, cert, key = (_file("HEDWIG_ETCD_" + n) for n in ("CA", "CERT", "KEY"))
    if (cert is None) != (key is None):
        raise UsageError("HEDWIG_ETCD_CERT and HEDWIG_ETCD_KEY go together")
    from hedwig.metadata.etcd import EtcdMetadataStore

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
        username=username,
        password=password,
        ca=ca,
        cert=cert,
        key=key,
    )


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
