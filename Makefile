# Hedwig: `make demo` runs the demo on an embedded cluster, `make test` runs every test.
# Both set up what they need on a fresh machine (virtualenv, ZooKeeper) and reuse it after.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: all deps venv zookeeper lint typecheck imports test unit demo bench clean

all: test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

zookeeper:
	@scripts/ensure-zookeeper.sh

deps: venv zookeeper

lint: venv
	$(VENV)/bin/ruff check src tests bench spark-apps
	$(VENV)/bin/ruff format --check src tests bench spark-apps

typecheck: venv
	$(VENV)/bin/mypy

imports: venv
	$(VENV)/bin/lint-imports

# Every test: static checks, unit and integration tests (real ZooKeeper, real hub processes).
test: deps lint typecheck imports
	$(PY) -m pytest -q $(PYTEST_ARGS) tests

unit: venv
	$(PY) -m pytest -q -m "not integration" tests

demo: deps
	$(PY) -m hedwig demo

bench: deps
	$(PY) -m hedwig bench --embedded --messages 300000
	$(PY) -m hedwig bench --embedded --rate 10000 --duration 10

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
