"""Fetching the peers: Kafka's broker jars from Maven Central, its Python client from PyPI.

Both are cached outside the work tree, under ``${HEDWIG_CACHE:-~/.cache/hedwig}/peers``, in a
directory named after their versions, so a second run costs nothing and a version change
fetches into a fresh directory:

- ``kafka-<version>-<digest of the pom>/jars``: ``org.apache.kafka:kafka_2.13`` and its
  runtime dependencies, plus a log4j2 binding, copied by Maven's
  ``dependency:copy-dependencies`` from a tiny pom (Maven resolves the dependency tree; writing
  our own resolver would be worse). Maven's own local repository is kept beside it (``m2``),
  not in ``~/.m2``.
- ``python-<digest of bench/requirements-peers.txt>``: ``confluent-kafka`` (librdkafka inside
  its wheel) and ``py-spy``, installed with ``pip install --target``. They are tools of the
  benchmark only, so they stay out of the project's extras: ``make venv`` (and so CI) never
  downloads them, and the Kafka driver finds them through ``PYTHONPATH``.

A machine without ``mvn`` or ``java`` gets Debian's ``maven`` and ``default-jre-headless``
(the same Java that runs ZooKeeper for the tests).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The peer: the newest Kafka Maven Central serves. The one before it in the table (4.1.1) is
# fetched only when its line is asked for (``--previous``), so the change of peer stays visible.
KAFKA_VERSION = "4.4.0"
PREVIOUS_KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
# Kafka's poms ask for slf4j 1.7 at run time; log4j's binding for slf4j 2 needs the 2.x API.
SLF4J_VERSION = "2.0.16"
HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE.parent / "requirements-peers.txt"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>hedwig.bench</groupId>
  <artifactId>kafka-peer</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>{slf4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def cache_root() -> Path:
    base = os.environ.get("HEDWIG_CACHE") or os.path.join(Path.home(), ".cache", "hedwig")
    return Path(base) / "peers"


def classpath_of(jars: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted(jars.glob("*.jar")))


@dataclass(frozen=True)
class PeerTools:
    """Where the fetched peers are: the broker's class path and the Python client's path;
    ``others`` the jars of other Kafka versions fetched on request, by version."""

    kafka_jars: Path
    python_path: Path
    others: dict[str, Path] = field(default_factory=dict)

    @property
    def classpath(self) -> str:
        return classpath_of(self.kafka_jars)

    @property
    def classpaths(self) -> dict[str, str]:
        """Every fetched version's class path, the peer's included."""
        return {
            KAFKA_VERSION: self.classpath,
            **{v: classpath_of(j) for v, j in self.others.items()},
        }


def _pom(version: str = KAFKA_VERSION) -> str:
    return _POM.format(kafka=version, log4j=LOG4J_VERSION, slf4j=SLF4J_VERSION)


def kafka_dir(version: str = KAFKA_VERSION) -> Path:
    digest = hashlib.sha256(_pom(version).encode()).hexdigest()[:10]
    return cache_root() / f"kafka-{version}-{digest}"


def python_dir() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:10]
    return cache_root() / f"python-{digest}"


def cached() -> PeerTools | None:
    """The peers if both are fetched already (the ``.complete`` markers), else ``None``."""
    k, p = kafka_dir(), python_dir()
    if (k / ".complete").exists() and (p / ".complete").exists():
        return PeerTools(kafka_jars=k / "jars", python_path=p)
    return None


def _ensure_debian(command: str, packages: list[str]) -> None:
    if shutil.which(command):
        return
    print(f"installing Debian's {' '.join(packages)} for {command}...", file=sys.stderr)
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        check=True,
        env=env,
    )


def fetch_kafka(version: str = KAFKA_VERSION) -> Path:
    d = kafka_dir(version)
    if (d / ".complete").exists():
        return d / "jars"
    _ensure_debian("java", ["default-jre-headless"])
    _ensure_debian("mvn", ["maven"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "pom.xml").write_text(_pom(version))
    print(f"fetching Kafka {version} from Maven Central into {d}...", file=sys.stderr)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(d / "pom.xml"),
            f"-Dmaven.repo.local={cache_root() / 'm2'}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={d / 'jars'}",
        ],
        check=True,
    )
    if not list((d / "jars").glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"Maven copied no Kafka jar into {d / 'jars'}")
    (d / ".complete").touch()
    return d / "jars"


def fetch_python() -> Path:
    d = python_dir()
    if (d / ".complete").exists():
        return d
    print(f"installing {REQUIREMENTS.name} into {d}...", file=sys.stderr)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--target",
            str(d),
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    (d / ".complete").touch()
    return d


def fetch(others: tuple[str, ...] = ()) -> PeerTools:
    """The peer and the Python tools, fetched if not cached; ``others``: more Kafka versions."""
    return PeerTools(
        kafka_jars=fetch_kafka(),
        python_path=fetch_python(),
        others={v: fetch_kafka(v) for v in others if v != KAFKA_VERSION},
    )


def main() -> None:
    tools = fetch((PREVIOUS_KAFKA_VERSION,) if "--previous" in sys.argv[1:] else ())
    print(tools.kafka_jars)
    for jars in tools.others.values():
        print(jars)
    print(tools.python_path)


if __name__ == "__main__":
    main()
