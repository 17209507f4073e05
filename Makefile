# Tidemark. `make demo` runs the bounded end-to-end scenario; `make test` runs the test suite.
# Both set up the environment first (venv, pinned requirements, cached jars) if needed.
.DEFAULT_GOAL := help
VENV := .venv/bin
PYTEST_ARGS ?=
# xdist workers for `make test` (0: one process)
PYTEST_WORKERS ?= 2

.PHONY: help setup setup-test run demo test test-deploy test-fast lint docs format clean bench-peers

help:
	@echo "make run        the platform: Airflow UI + scheduler + live generator + supervised stream (Ctrl-C stops)"
	@echo "make demo       bounded end-to-end run: generate, stream, reconcile, report"
	@echo "make test       the full test suite (unit, Spark integration, crash/kill tests)"
	@echo "make test-fast  unit tests only (no JVM)"
	@echo "make lint       ruff check + format check, import contracts (.importlinter), mypy, docs --strict"
	@echo "make docs       the documentation site (mkdocs.yml) into site/"
	@echo "make setup      venv + pinned requirements + JVM jar cache (run by the others)"
	@echo "make clean      remove var/ (demo and local runs), keep the venv and jar cache"
	@echo "make bench-peers Tidemark against plain Spark, Flink and the limits (~30 min; docs/benchmarks.md)"

setup:
	@scripts/setup.sh

# the tests also drive headless Chromium and docker-compose (installed with apt when missing)
setup-test:
	@scripts/setup.sh --test-tools

run: setup
	$(VENV)/python -m tidemark_airflow.launcher $(RUN_ARGS)

demo: setup
	$(VENV)/tidemark demo

test: setup-test
	$(VENV)/python -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup) -m "not deploy" $(PYTEST_ARGS)

# the compose deployment end to end on a private Docker engine (docker/README.md; ~40 min)
test-deploy: setup-test
	$(VENV)/python -m pytest -p no:cacheprovider -s tests/deploy $(PYTEST_ARGS)

test-fast: setup
	$(VENV)/python -m pytest -m "not spark and not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/ruff check spark_jobs plugins dags tests bench docs/hooks
	$(VENV)/ruff format --check spark_jobs plugins dags tests bench docs/hooks
	$(VENV)/lint-imports --no-cache
	$(VENV)/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/mkdocs build --strict --quiet --site-dir build/docs-check

# the documentation site (docs/, mkdocs.yml) into site/; the reference pages are generated from the code
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/mkdocs build --strict --site-dir site

format: setup
	$(VENV)/ruff format spark_jobs plugins dags tests bench
	$(VENV)/ruff check --fix spark_jobs plugins dags tests bench

# the peers' venv (PyFlink, polars) apart from .venv, then the paired rounds (bench/peers.py)
bench-peers: setup
	scripts/peers_venv.sh
	$(VENV)/python bench/peers.py $(BENCH_ARGS)

clean:
	rm -rf var
