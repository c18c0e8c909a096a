"""The hub and operator images without a Docker engine: hadolint on both Dockerfiles, their
.dockerignore files against what they copy, their shape (multi-stage, non-root, health check,
labels, pinned dependencies), and their build stages rehearsed command by command in a sandbox
(a clean virtualenv from the pinned constraints). The hub so installed then runs against a real
ZooKeeper and passes the image's own HEALTHCHECK command. The Spark image has Spark's own shape
(its user, its entrypoint, Java): it gets the lint, the context check and its pins. The images
as built (`make images`) are checked by test_built_images.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port
from tests.chart import dockerfile
from tests.chart.tools import ROOT, run, tool_path

IMAGES = {
    "hub": ROOT / "hub_image" / "Dockerfile",
    "operator": ROOT / "operator" / "Dockerfile",
}
SPARK_IMAGE = ROOT / "spark-apps" / "Dockerfile"
LINTED = {**IMAGES, "spark": SPARK_IMAGE}
CONSTRAINTS = ROOT / "hub_image" / "constraints.txt"


def _pins() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize("image", sorted(LINTED))
def test_hadolint_passes(image: str) -> None:
    proc = run([tool_path("hadolint"), "--failure-threshold", "info", LINTED[image]], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_image_shape(image: str) -> None:
    stages = dockerfile.parse(IMAGES[image])
    assert len(stages) == 2, "multi-stage: a build stage and a runtime stage"
    build, runtime = stages
    assert build.name == "build"
    assert build.base == runtime.base == "${PYTHON_IMAGE}"
    # A slim Python, of the minor version the project is tested with.
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in IMAGES[image].read_text()
    # Non-root by number (Kubernetes' runAsNonRoot can only check numeric users).
    (user,) = runtime.all("USER")
    assert user.args.split(":")[0].isdigit() and int(user.args.split(":")[0]) >= 10000
    (health,) = runtime.all("HEALTHCHECK")
    assert health.args.startswith("--interval=") and " CMD [" in health.args
    labels = " ".join(i.args for i in runtime.all("LABEL"))
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    # Only the built virtualenv reaches the runtime stage.
    copies = [i.flags_and_words() for i in runtime.all("COPY")]
    assert copies and all(flags.get("from") == "build" for flags, _ in copies)
    # Every pip install is constrained by the lock file.
    installs = [i.args for i in build.all("RUN") if "pip install" in i.args]
    assert installs and all("-c constraints.txt" in a for a in installs)


@pytest.mark.parametrize("image", sorted(LINTED))
def test_dockerignore_sends_exactly_what_the_image_copies(image: str) -> None:
    path = LINTED[image]
    ignore = path.with_name("Dockerfile.dockerignore")
    for stage in dockerfile.parse(path):
        for ins in stage.all("COPY"):
            flags, words = ins.flags_and_words()
            if "from" in flags:
                continue
            for source in words[:-1]:
                src = ROOT / source
                files = [src] if src.is_file() else [p for p in src.rglob("*.py")]
                assert files, source
                for f in files:
                    rel = f.relative_to(ROOT).as_posix()
                    assert dockerfile.dockerignore_includes(ignore, rel), f"{rel} is ignored"
    for unwanted in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "e2e/test_chart.py",
        "charts/hedwig/Chart.yaml",
        "src/hedwig/__pycache__/x.pyc",
    ):
        assert not dockerfile.dockerignore_includes(ignore, unwanted), unwanted


def test_constraints_pin_every_runtime_dependency() -> None:
    pins = _pins()
    assert pins["msgspec"] == "0.22.0" and pins["kopf"] == "1.45.2"
    assert "kazoo" not in pins  # the ZooKeeper client is Hedwig's own (a test dependency)
    text = (ROOT / "pyproject.toml").read_text()
    for name in ("msgspec", "prometheus-client", "uvloop", "kopf", "kubernetes", "pyyaml"):
        assert name in pins, f"{name} is not pinned in {CONSTRAINTS}: run hub_image/lock.sh"
        assert f"{name}=={pins[name]}".lower() in text.lower().replace("_", "-"), (
            f"{name} {pins[name]} differs from pyproject.toml: run hub_image/lock.sh"
        )


def test_spark_image_installs_the_spark_extras_pins() -> None:
    """The Spark image installs the `spark` extra by hand (PySpark from PyPI is Spark itself:
    spark-submit, the jars, the Kubernetes backend), at the extra's pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = (d.partition("==") for d in project["optional-dependencies"]["spark"])
    extra = {name.lower(): version for name, _, version in pins}
    assert set(extra) == {"pyspark", "pyarrow"}, "the Spark image installs these two by hand"
    text = SPARK_IMAGE.read_text()
    assert re.findall(r"pyarrow==([\w.]+)", text) == [extra["pyarrow"]]
    assert re.findall(r"pyspark==([\w.]+)", text) == [extra["pyspark"]]
    # Built on the same base as the other images: no upstream Spark image is pulled.
    (stage,) = dockerfile.parse(SPARK_IMAGE)
    assert stage.base == "${PYTHON_IMAGE}"
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text


def _rehearse(image: str, tmp_path: Path) -> tuple[dockerfile.Sandbox, dockerfile.Stage]:
    build, runtime = dockerfile.parse(IMAGES[image])
    sandbox = dockerfile.Sandbox(tmp_path / "sandbox", ROOT)
    sandbox.rehearse(build)
    for ins in runtime.all("COPY"):
        _, words = ins.flags_and_words()
        assert Path(sandbox.path(words[0])).exists(), f"the build stage made no {words[0]}"
    return sandbox, runtime


def _frozen(venv: Path) -> dict[str, str]:
    out = run(
        [
            venv / "bin" / "pip",
            "freeze",
            "--exclude",
            "hedwig-pubsub",
            "--disable-pip-version-check",
        ]
    )
    frozen = {}
    for line in out.stdout.splitlines():
        name, _, version = line.partition("==")
        frozen[name.lower().replace("_", "-")] = version
    return frozen


def _runtime_env(sandbox: dockerfile.Sandbox, runtime: dockerfile.Stage) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(sandbox.root)}
    for ins in runtime.all("ENV"):
        for key, value in dockerfile.env_pairs(ins.args).items():
            env[key] = sandbox.path(value.replace("$PATH", env["PATH"]))
    return env


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_hub_image_install_steps_work_and_its_healthcheck_passes(tmp_path: Path) -> None:
    sandbox, runtime = _rehearse("hub", tmp_path)
    venv = sandbox.root / "opt" / "hedwig"
    frozen = _frozen(venv)
    pins = _pins()
    assert frozen and all(pins.get(name) == version for name, version in frozen.items()), frozen

    # Run the hub as the image does (ENTRYPOINT + CMD, its ENV), on free ports.
    env = _runtime_env(sandbox, runtime)
    metrics_port = free_port()
    data_dir = tmp_path / "data"
    (ep,) = runtime.all("ENTRYPOINT")
    (cmd,) = runtime.all("CMD")
    argv = dockerfile.exec_form(ep.args) + dockerfile.exec_form(cmd.args)
    assert argv == ["hedwig", "hub"]
    with ZooKeeperServer(data_dir=str(tmp_path / "zk")) as zk:
        env.update(
            HEDWIG_ZK=zk.address,
            HEDWIG_REGION="image-test",
            HEDWIG_LISTEN=f"127.0.0.1:{free_port()}",
            HEDWIG_METRICS_PORT=str(metrics_port),
            HEDWIG_DATA_DIR=str(data_dir),
        )
        assert env["PATH"].startswith(f"{venv}/bin:")
        hub = subprocess.Popen(
            argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            (health,) = runtime.all("HEALTHCHECK")
            check = dockerfile.exec_form(health.args.split(" CMD ", 1)[1])
            deadline = time.monotonic() + 60
            while True:
                proc = subprocess.run(check, env=env, capture_output=True, text=True)
                if proc.returncode == 0:
                    break
                assert hub.poll() is None, hub.stdout.read() if hub.stdout else ""
                assert time.monotonic() < deadline, proc.stderr
                time.sleep(0.5)
            hub.send_signal(signal.SIGTERM)  # the image's STOPSIGNAL: graceful hand-off
            assert hub.wait(30) == 0
        finally:
            if hub.poll() is None:
                hub.kill()
                hub.wait()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_operator_image_install_steps_work(tmp_path: Path) -> None:
    sandbox, runtime = _rehearse("operator", tmp_path)
    venv = sandbox.root / "opt" / "hedwig-operator"
    frozen = _frozen(venv)
    pins = _pins()
    assert frozen and all(pins.get(name) == version for name, version in frozen.items()), frozen
    assert "kopf" in frozen and "msgspec" in frozen and "kazoo" not in frozen
    env = _runtime_env(sandbox, runtime)
    assert env["PYTHONPATH"] == f"{venv}/app"
    (ep,) = runtime.all("ENTRYPOINT")
    argv = dockerfile.exec_form(ep.args)
    proc = subprocess.run(
        [*argv, "--help"], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "--namespace" in proc.stdout
    # The operator imports the core's client, metadata and placement layers.
    proc = subprocess.run(
        ["python", "-c", "import hedwig_operator.handlers, hedwig.client, hedwig.placement"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # The chart's metricsApi runs the external metrics API from this image.
    proc = subprocess.run(
        ["python", "-m", "hedwig_operator.metricsapi", "--help"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--requestheader-client-ca-file" in proc.stdout
    assert os.path.realpath(env["PATH"].split(":")[0]) == os.path.realpath(venv / "bin")
