# Hedwig: `make demo` runs the demo on an embedded cluster, `make test` runs every test.
# Both set up what they need on a fresh machine (virtualenv, ZooKeeper) and reuse it after.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: all deps venv zookeeper browser lint typecheck imports test unit demo demo-screenshot bench bench-spark clean

all: test

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

# Debian's chromium, for the Spark demo's browser test.
browser:
	@spark-apps/scripts/ensure-chromium.sh

lint: venv
	$(VENV)/bin/ruff check src tests bench spark-apps
	$(VENV)/bin/ruff format --check src tests bench spark-apps

typecheck: venv
	$(VENV)/bin/mypy
	cd spark-apps && $(CURDIR)/$(VENV)/bin/mypy --config-file pyproject.toml

imports: venv
	$(VENV)/bin/lint-imports

# Every test: static checks, unit and integration tests (real ZooKeeper, real hub processes).
test: deps browser lint typecheck imports
	$(PY) -m pytest -q $(PYTEST_ARGS) tests e2e

unit: venv
	$(PY) -m pytest -q -m "not integration" tests

# The traffic heat map: three hubs, vehicles, Spark streaming, a live page (until Ctrl-C).
demo: deps
	$(PY) spark-apps/demo/run_demo.py

# Refresh docs/spark-demo.png by running the browser test.
demo-screenshot: deps browser
	HEDWIG_DEMO_SCREENSHOT=$(CURDIR)/docs/spark-demo.png $(PY) -m pytest -q tests/spark/test_demo_browser.py

bench: deps
	$(PY) -m hedwig bench --embedded --messages 300000
	$(PY) -m hedwig bench --embedded --rate 10000 --duration 10

# Batch read throughput of the Spark data source on local[2] (docs/benchmarks.md, Spark).
bench-spark: deps
	$(PY) spark-apps/bench/batch_read.py

# The Kubernetes operator (operator/hedwig_operator, outside src/: it is its own image) and its
# end-to-end tests against a real control plane built from Go modules (e2e/controlplane: long
# the first time, instant once cached under ~/.cache/hedwig). `make test` runs all of it.
.PHONY: controlplane lint-operator typecheck-operator imports-operator e2e
OPERATOR_LINTED := operator e2e/test_operator.py e2e/hedwig_e2e.py

controlplane:
	e2e/controlplane/build.sh

lint-operator: venv
	$(VENV)/bin/ruff check $(OPERATOR_LINTED)
	$(VENV)/bin/ruff format --check $(OPERATOR_LINTED)

typecheck-operator: venv
	MYPYPATH=operator $(VENV)/bin/mypy -p hedwig_operator

imports-operator: venv
	PYTHONPATH=operator $(VENV)/bin/lint-imports --config operator/importlinter.ini

test: lint-operator typecheck-operator imports-operator controlplane

e2e: deps controlplane
	$(PY) -m pytest -q $(PYTEST_ARGS) e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
