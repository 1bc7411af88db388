# spark-rocketmq: make run | make test | make test-spark35 | make dist | make bench | make docs
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DOCS_STAMP := $(VENV)/.docs-installed-stamp
PY_SOURCES := spark_rocketmq tests jobs bench tools

# Spark's Python workers must run the driver's interpreter.
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

# PySpark 3.5 (foreachBatch sink, producer, jobs) in a venv of its own; it runs on Java 17 at most.
VENV35    := .venv-spark35
PY35      := $(VENV35)/bin/python
STAMP35   := $(VENV35)/.installed-stamp
PYSPARK35 ?= 3.5.9
JAVA17_HOME ?= $(firstword $(wildcard /usr/lib/jvm/java-17-openjdk*))

# Real Apache RocketMQ kits (folders with an `rmq` script) that make test-real starts, one after the other.
RMQ_KITS ?= ../shared/rocketmq-4.9.8 ../shared/rocketmq-5.3.3

.PHONY: setup setup-spark35 run test test-spark35 test-real test-connect test-standalone dist lint docs bench bench-real \
	bench-read local-cluster clean

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

## make test-real: the real-cluster tier (tests/real) against each kit of RMQ_KITS, started on free ports and
## removed afterwards; or against your cluster with ROCKETMQ_NAMESRV_ADDR=host:port RMQ_KITS= make test-real
test-real: setup
	$(PY) -m tests.real.tier $(RMQ_KITS)

## make test-connect: the Spark Connect tests alone (remote("local[2]"), a local Connect server)
test-connect: setup
	$(PY) -m pytest -ra -m connect tests/spark

## make test-standalone: spark-submit to a Spark standalone cluster (a master, two workers) whose executors'
## Python has no spark_rocketmq: the package shipped as the zip of make dist (--py-files) and as a packed
## site-packages (--archives), a worker killed mid-job (tests marked standalone; not in make test)
test-standalone: setup
	$(PY) -m pytest -ra -m standalone tests/standalone

## make dist: the sdist and the pure wheel (twine-checked) in dist/, beside them the --py-files zip and the
## spark.archives tar.gz of the package with its pure-Python dependencies (docs/deploying.md)
dist: setup
	rm -rf dist
	$(PY) tools/build_dist.py --out-dir dist

## make test-spark35: the Spark sink, producer-in-Spark and job tests on PySpark $(PYSPARK35) (venv $(VENV35))
setup-spark35: $(STAMP35)

$(STAMP35): pyproject.toml
	$(PYTHON) -m venv $(VENV35)
	$(PY35) -m pip install --quiet --upgrade pip
	$(PY35) -m pip install --quiet -e '.[spark,test]' 'pyspark==$(PYSPARK35)'
	touch $(STAMP35)

test-spark35: export PYSPARK_PYTHON := $(abspath $(PY35))
test-spark35: export PYSPARK_DRIVER_PYTHON := $(abspath $(PY35))
test-spark35: export JAVA_HOME := $(or $(JAVA17_HOME),$(JAVA_HOME))
test-spark35: setup-spark35
	$(PY35) -c 'import pyspark, sys; v = pyspark.__version__; print("PySpark", v); sys.exit(not v.startswith("3.5."))'
	$(PY35) -m pytest -ra -p no:cacheprovider tests/spark

lint: setup
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy --strict spark_rocketmq/protocol spark_rocketmq/client tools/build_dist.py
	$(VENV)/bin/mypy spark_rocketmq/local spark_rocketmq/spark

## make docs: the documentation site into build/site (MkDocs, --strict: a broken link, a missing page or an
## options table that differs from the code fails it); installs the docs extra into the venv first
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "docs: build/site/index.html"

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

## make bench: send engine, encoder, client, local broker and Spark sink benchmarks (figures, not tests)
bench: setup
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_client.py
	$(PY) bench/bench_local.py
	$(PY) bench/bench_sink.py

## make bench-real: the sink, send_batch and single sends beside Java's BatchProducer and Producer, one run,
## on a real RocketMQ started from the first kit of RMQ_KITS (figures, not tests)
bench-real: setup
	$(PY) bench/bench_real.py --kit $(firstword $(RMQ_KITS))

## make bench-read: spark.read.format("rocketmq") of 1,000,000 x 100 B into the noop sink beside Java's
## DefaultLitePullConsumer, one run, on a real RocketMQ started from the first kit of RMQ_KITS (figures, not tests)
bench-read: setup
	$(PY) bench/bench_read.py --kit $(firstword $(RMQ_KITS))

## make local-cluster: a local NameServer (9876) and two brokers in the foreground; Ctrl-C stops them
local-cluster: setup
	$(PY) -m spark_rocketmq.local --brokers 2 --namesrv-port 9876 --broker-port 10911 --store-dir var/store

clean:
	rm -rf $(VENV) $(VENV35) var build dist *.egg-info .pytest_cache .ruff_cache .hypothesis spark-warehouse
