"""The data source's options, parsed once into typed records.

Names follow Spark's Kafka source where the idea is the same, so a Kafka user can guess them:
``topic`` / ``topics`` / ``topicPattern`` (exactly one; ``subscribe`` and ``subscribePattern``
are accepted as aliases), ``startingOffsets``, ``endingOffsets``, ``failOnDataLoss``,
``maxRecordsPerTrigger`` (alias ``maxOffsetsPerTrigger``), ``minPartitions``. The cluster is
named by ``hubs`` (comma-separated HOST:PORT, any hubs will do: they redirect) or by
``metadata`` (the metadata URL the hubs use, ZooKeeper's or etcd's; ``zookeeper`` and ``zk``
are accepted as aliases) plus ``region`` (the alive hubs are looked up there;
``topicPattern`` needs it, since only the metadata store knows every topic). Secured hubs:
``tls``, ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``, ``tokenFile`` (``SecurityOptions``).

Spark passes options as a case-insensitive map of strings; we look names up in lower case.
A bad option fails the query at planning time with ``ValueError`` naming the option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hedwig.security import ClientSecurity
from hedwig_spark.offsets import OffsetSpec, parse_offset_spec

LATEST_SPEC = OffsetSpec("latest")
DEFAULT_RETRY_DEADLINE_S = 120.0
DEFAULT_MAX_ROWS_PER_PARTITION = 500_000
DEFAULT_CHUNK_ROWS = 16_000


@dataclass(frozen=True, slots=True)
class SecurityOptions:
    """How to reach secured hubs (docs/security.md): ``tls`` (``true`` with the system's CAs),
    ``tlsCaFile``, ``tlsCertFile`` and ``tlsKeyFile`` (a client certificate), ``tokenFile``
    (a token, e.g. a projected ServiceAccount token). Unset options fall back to the
    ``HEDWIG_*`` variables of the process reading or writing (driver or executor), and a pod's
    projected token is found by default. Paths, not contents: they are read where the task
    runs, so executors need the files too (a mounted Secret)."""

    tls: bool = False
    tls_ca: str | None = None
    cert: str | None = None
    key: str | None = None
    token_file: str | None = None

    def client_security(self) -> ClientSecurity:
        return ClientSecurity.from_env(
            tls=self.tls or None,
            tls_ca=self.tls_ca,
            cert=self.cert,
            key=self.key,
            token_file=self.token_file,
        )


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Where the hubs are, and how to reach them."""

    hubs: tuple[str, ...] = ()
    # The metadata URL (option ``metadata``, or ``zookeeper``/``zk``).
    metadata: str | None = None
    region: str = "default"
    # How long one read or publish keeps retrying through topic moves and hub restarts before
    # the task fails. A graceful move takes well under a second; a hub that crashed needs its
    # ZooKeeper session to expire (6 s by default) and, with one copy of a topic, to restart.
    retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S
    security: SecurityOptions = SecurityOptions()


@dataclass(frozen=True, slots=True)
class ReadOptions:
    cluster: ClusterOptions
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    # None: earliest for batch queries, latest for streaming ones (as Kafka's defaults).
    starting: OffsetSpec | None = None
    # Batch queries only; a streaming query always runs to the latest offsets.
    ending: OffsetSpec = LATEST_SPEC
    fail_on_data_loss: bool = True
    # At most this many rows per micro-batch over all topics (None: everything available).
    max_records_per_trigger: int | None = None
    # Split topic ranges so that a read has at least this many Spark partitions (tasks).
    min_partitions: int = 1
    # And never put more than this many messages in one partition: bounds a task's memory.
    max_rows_per_partition: int = DEFAULT_MAX_ROWS_PER_PARTITION
    # Messages asked for per READ request; the hub answers whole batches up to this many.
    fetch_messages: int = 20_000
    # How often a streaming query with ``topicPattern`` looks for new topics in ZooKeeper.
    topic_refresh_s: float = 5.0

    @property
    def batch_start(self) -> OffsetSpec:
        return self.starting or OffsetSpec("earliest")

    @property
    def stream_start(self) -> OffsetSpec:
        return self.starting or OffsetSpec("latest")


@dataclass(frozen=True, slots=True)
class WriteOptions:
    cluster: ClusterOptions
    # Topic for rows without a ``topic`` column (or with a null one).
    topic: str | None = None
    # Set by callers that write the same logical batch again (foreachBatch: the query and
    # batch ids); publisher ids are derived from it, so the rewrite adds no duplicates.
    writer_id: str | None = None
    # Rows handed to the client at once and then awaited. Batch boundaries depend only on the
    # rows, never on timing, which is what lets the hub recognise a replayed batch.
    chunk_rows: int = DEFAULT_CHUNK_ROWS


def _get(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None and value != "":
            return value
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name!r} must be true or false, got {raw!r}")


def _int(options: Mapping[str, str], minimum: int, *names: str) -> int | None:
    raw = _get(options, *names)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {names[0]!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {names[0]!r} must be at least {minimum}, got {value}")
    return value


def parse_cluster(options: Mapping[str, str]) -> ClusterOptions:
    hubs_raw = _get(options, "hubs", "hub")
    metadata = _get(options, "metadata", "zookeeper", "zk")
    hubs = tuple(h.strip() for h in (hubs_raw or "").split(",") if h.strip())
    if not hubs and metadata is None:
        raise ValueError(
            "set option 'hubs' (HOST:PORT,...) or 'metadata' (the metadata URL, alias "
            "'zookeeper'; with 'region')"
        )
    deadline_ms = _int(options, 1, "retryDeadlineMs")
    tls = (_get(options, "tls") or "false").lower()
    if tls not in ("true", "false"):
        raise ValueError(f"option 'tls' must be true or false, got {tls!r}")
    return ClusterOptions(
        hubs=hubs,
        metadata=metadata,
        region=_get(options, "region") or "default",
        retry_deadline_s=deadline_ms / 1000 if deadline_ms else DEFAULT_RETRY_DEADLINE_S,
        security=SecurityOptions(
            tls=tls == "true",
            tls_ca=_get(options, "tlsCaFile"),
            cert=_get(options, "tlsCertFile"),
            key=_get(options, "tlsKeyFile"),
            token_file=_get(options, "tokenFile"),
        ),
    )


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    cluster = parse_cluster(options)
    topic = _get(options, "topic")
    topics = _get(options, "topics", "subscribe")
    pattern = _get(options, "topicPattern", "subscribePattern", "topicsPattern")
    choices = (("topic", topic), ("topics", topics), ("topicPattern", pattern))
    given = [name for name, value in choices if value is not None]
    if len(given) != 1:
        raise ValueError(
            "set exactly one of 'topic', 'topics' and 'topicPattern'"
            + (f" (got {', '.join(given)})" if given else "")
        )
    names: tuple[str, ...] = ()
    compiled: re.Pattern[str] | None = None
    if topic is not None:
        names = (topic,)
    elif topics is not None:
        names = tuple(dict.fromkeys(t.strip() for t in topics.split(",") if t.strip()))
        if not names:
            raise ValueError("option 'topics' names no topic")
    else:
        assert pattern is not None
        if cluster.metadata is None:
            raise ValueError(
                "option 'topicPattern' needs 'metadata' (alias 'zookeeper'): only the "
                "metadata store lists topics"
            )
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"option 'topicPattern' is not a regular expression: {exc}") from None
    min_partitions = _int(options, 1, "minPartitions")
    cap = _int(options, 1, "maxRecordsPerTrigger", "maxOffsetsPerTrigger")
    per_partition = _int(options, 1, "maxRowsPerPartition")
    refresh_ms = _int(options, 0, "topicRefreshIntervalMs")
    starting = _get(options, "startingOffsets")
    return ReadOptions(
        cluster=cluster,
        topics=names,
        pattern=compiled,
        starting=parse_offset_spec(starting, "starting") if starting else None,
        ending=parse_offset_spec(_get(options, "endingOffsets") or "latest", "ending"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        max_records_per_trigger=cap,
        min_partitions=min_partitions or 1,
        max_rows_per_partition=per_partition or DEFAULT_MAX_ROWS_PER_PARTITION,
        topic_refresh_s=refresh_ms / 1000 if refresh_ms is not None else 5.0,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    chunk = _int(options, 1, "chunkRows")
    return WriteOptions(
        cluster=parse_cluster(options),
        topic=_get(options, "topic"),
        writer_id=_get(options, "writerId"),
        chunk_rows=chunk or DEFAULT_CHUNK_ROWS,
    )
