# spark-rocketmq: make run | make test | make bench
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PY_SOURCES := spark_rocketmq tests jobs bench

# Spark's Python workers must run the driver's interpreter.
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup run test lint bench local-cluster clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make run: start a local NameServer + 2 brokers, run the streaming job on a bounded input, show what was published
run: setup
	$(PY) jobs/demo.py --conf conf/local.toml

## make test: lint, then the whole suite (protocol, client, local cluster, interop, Spark)
test: setup lint
	$(PY) -m pip install --quiet 'rocketmq==0.4.4' || echo "note: rocketmq 0.4.4 wheel not installable here; interop tests will skip"
	$(PY) -m pytest -ra

lint: setup
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)

## make bench: encoder, client, local broker and Spark sink benchmarks (figures, not tests)
bench: setup
	$(PY) bench/bench_client.py
	$(PY) bench/bench_local.py
	$(PY) bench/bench_sink.py

## make local-cluster: a local NameServer (9876) and two brokers in the foreground; Ctrl-C stops them
local-cluster: setup
	$(PY) -m spark_rocketmq.local --brokers 2 --namesrv-port 9876 --broker-port 10911 --store-dir var/store

clean:
	rm -rf $(VENV) var build *.egg-info .pytest_cache .ruff_cache .hypothesis spark-warehouse
