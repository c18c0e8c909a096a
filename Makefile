# Hedwig: `make demo` runs the demo on an embedded cluster, `make test` runs every test.
# Both set up what they need on a fresh machine (virtualenv, ZooKeeper) and reuse it after.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: all deps venv zookeeper etcd browser lint typecheck imports imports-spark test unit demo demo-screenshot bench bench-spark bench-peers nemesis clean

all: test

# One editable install of the root distribution: the core (hedwig), the operator
# (hedwig_operator) and the Spark data source (hedwig_spark), with their extras.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark,operator]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

zookeeper:
	@scripts/ensure-zookeeper.sh

deps: venv zookeeper

# A real etcd for the etcd store's tests, built from Go modules with the e2e control plane
# and cached under ~/.cache/hedwig (hedwig.devcluster.etcd finds it there).
etcd:
	@e2e/controlplane/build.sh >/dev/null

# Debian's chromium, for the Spark demo's browser test.
browser:
	@spark-apps/scripts/ensure-chromium.sh

lint: venv
	$(VENV)/bin/ruff check src tests bench spark-apps
	$(VENV)/bin/ruff format --check src tests bench spark-apps

# The core and spark-apps/ (pyproject.toml's [tool.mypy] files); the operator separately below.
typecheck: venv
	$(VENV)/bin/mypy

imports: venv
	$(VENV)/bin/lint-imports

# The Spark source, jobs and demo keep to the client and metadata layers
# (spark-apps/importlinter.ini). The jobs, the traffic model and the demo are not installed:
# PYTHONPATH finds them in spark-apps/.
imports-spark: venv
	PYTHONPATH=spark-apps $(VENV)/bin/lint-imports --config spark-apps/importlinter.ini

# Every test: static checks, unit and integration tests (real ZooKeeper, real hub processes).
# scripts/run-tests.sh: the tests that own the machine (e2e/, the network lab, the image
# builds) and the rest of tests/ as two pytest processes at once, then the tests marked
# "alone" by themselves; every part runs, and the target fails if any did.
test: deps etcd browser lint typecheck imports imports-spark
	scripts/run-tests.sh $(PY) $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest -q -m "not integration" tests

# The traffic heat map: three hubs, vehicles, Spark streaming, a live page (until Ctrl-C).
demo: deps
	cd spark-apps && $(CURDIR)/$(PY) -m demo.run_demo

# Refresh docs/spark-demo.png by running the browser test.
demo-screenshot: deps browser
	HEDWIG_DEMO_SCREENSHOT=$(CURDIR)/docs/spark-demo.png $(PY) -m pytest -q tests/spark/test_demo_browser.py

bench: deps
	$(PY) -m hedwig bench --embedded --messages 300000
	$(PY) -m hedwig bench --embedded --rate 10000 --duration 10

# Hedwig and Kafka 4.4.0 side by side on loopback (docs/benchmarks.md, "Side by side with
# Kafka"): fetches Kafka's jars (Maven Central) and confluent-kafka (PyPI) into
# ~/.cache/hedwig/peers, runs every workload against each system, alternating, and writes the
# table into the docs. Under 30 minutes with the default 3 rounds; PEERS_ARGS="--previous"
# adds Kafka 4.1.1's durable line, PEERS_ARGS="--rounds 5 --workloads 1 7b" etc.
PEERS_ARGS ?=
bench-peers: deps
	$(PY) -m bench.peers $(PEERS_ARGS)

# Batch read throughput of the Spark data source on local[2] (docs/benchmarks.md, Spark).
bench-spark: deps
	$(PY) spark-apps/bench/batch_read.py

# The Kubernetes operator (operator/hedwig_operator, outside src/: it is its own image; the
# root distribution ships it, so `make venv` installs it) and its end-to-end tests against a
# real control plane built from Go modules (e2e/controlplane: long the first time, instant
# once cached under ~/.cache/hedwig). `make test` runs all of it.
.PHONY: controlplane node images lint-operator typecheck-operator imports-operator e2e
OPERATOR_LINTED := operator e2e/test_operator.py e2e/test_security.py e2e/hedwig_e2e.py \
	e2e/controlplane e2e/realpods.py e2e/conftest.py e2e/test_node.py e2e/test_realpods.py \
	e2e/scrape.py e2e/outside.py e2e/test_external_access.py e2e/test_metrics_api.py

controlplane:
	e2e/controlplane/build.sh

# The real node of the e2e test bed: kubelet and kube-proxy (the control plane's Kubernetes
# version), the CNI plugins, CoreDNS and the pause image, cached under ~/.cache/hedwig/node;
# containerd and runc are Debian's (scripts/ensure-node-packages.sh).
node: controlplane
	scripts/ensure-node-packages.sh
	e2e/controlplane/build-node.sh

# The hub, operator and Spark images from their Dockerfiles, without a Docker engine or a
# registry (images/build.sh: mmdebstrap base, buildah), as docker-archive tars cached under
# ~/.cache/hedwig/images by their inputs. IMAGE_PREFIX=registry/path/ names them for a push
# (docs/deploying.md).
images:
	images/build.sh

lint-operator: venv
	$(VENV)/bin/ruff check $(OPERATOR_LINTED)
	$(VENV)/bin/ruff format --check $(OPERATOR_LINTED)

typecheck-operator: venv
	$(VENV)/bin/mypy -p hedwig_operator

imports-operator: venv
	$(VENV)/bin/lint-imports --config operator/importlinter.ini

test: lint-operator typecheck-operator imports-operator controlplane node images

e2e: deps controlplane
	$(PY) -m pytest -q $(PYTEST_ARGS) e2e

# A long nemesis run against the network lab (tests/failure/nemesis.py; docs/failure-testing.md):
# random partitions, slow links and disks, kill -9, freezes and ZooKeeper restarts for
# DURATION seconds under load, then the whole history checked. SEED=n replays a run.
DURATION ?= 600
SEED ?=
nemesis: deps
	$(PY) -m tests.failure.nemesis --duration $(DURATION) $(if $(SEED),--seed $(SEED))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The Helm chart, the images, the alerts and the dashboard (charts/hedwig, hub_image,
# operator/Dockerfile, spark-apps/Dockerfile, skaffold.yaml, monitoring/; docs/deploying.md).
# Their static tests are tests/chart (in `pytest tests`: helm, promtool, hadolint, a rehearsal
# of the images' build stages); e2e/test_chart.py and e2e/test_monitoring.py run against the
# control plane and a real Prometheus. `make test` runs all of it.
.PHONY: prometheus lint-chart dashboards dashboard-picture
CHART_LINTED := monitoring tests/chart e2e/test_chart.py e2e/test_monitoring.py
HELM = $$(e2e/controlplane/build.sh | tail -1)/helm

# Debian's prometheus (and promtool), for the alert and dashboard tests.
prometheus:
	@monitoring/ensure-prometheus.sh

lint-chart: venv controlplane
	$(VENV)/bin/ruff check $(CHART_LINTED)
	$(VENV)/bin/ruff format --check $(CHART_LINTED)
	$(VENV)/bin/hadolint hub_image/Dockerfile operator/Dockerfile spark-apps/Dockerfile
	$(PY) monitoring/dashboards.py --check
	$(HELM) lint --strict charts/hedwig
	for f in charts/hedwig/ci/*-values.yaml; do $(HELM) lint --strict charts/hedwig -f $$f || exit 1; done

# Regenerate charts/hedwig/dashboards/*.json from monitoring/dashboards.py.
dashboards: venv
	$(PY) monitoring/dashboards.py

# Refresh docs/load-dashboard.png: real hubs under load, scraped by Prometheus, drawn.
dashboard-picture: deps prometheus controlplane
	HEDWIG_DASHBOARD_PICTURE=$(CURDIR)/docs/load-dashboard.png $(PY) -m pytest -q -s e2e/test_monitoring.py

test: prometheus lint-chart
