# The two commands of the README, and their parts. Everything downloads by name into ignored
# caches (.venv, ~/.cache/pip, Maven's repository, the stack cache) and is reused on later runs.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test lint unit integration matrix soak bench bench-decode bench-hotpath bench-pipeline bench-spark fuzz stack-up stack-down stack-status clean

## demo: start the local stack and stream a sample database's changes through pgbridge
demo: $(VENV)/.installed
	$(BIN)/pgbridge demo

## test: lint, type-check and run the whole test suite on the real local stack; then the unit
## tests once more on the pure-Python path (what a machine without a C compiler runs)
test: lint
	$(BIN)/pytest $(PYTEST_ARGS)
	PGBRIDGE_NATIVE=0 $(BIN)/pytest -m "not integration and not slow" --ignore=tests/native -p no:cacheprovider -q $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(BIN)/ruff check bridge tests bench
	$(BIN)/mypy
	bash dev-stack/compose-config.sh

unit: $(VENV)/.installed
	$(BIN)/pytest -m "not integration" $(PYTEST_ARGS)

integration: $(VENV)/.installed
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

## matrix: the replication source's integration tests on every supported PostgreSQL major
matrix: $(VENV)/.installed
	PGBRIDGE_PG_VERSIONS=13,14,15,16,17,18 $(BIN)/pytest tests/integration/source $(PYTEST_ARGS)

## soak: 30 minutes of random faults under a writer on a rig of its own (not in CI); prints the
## table fault x recovered / time to recover / duplicates / lost. SOAK_ARGS="--minutes 5 --seed 1"
SOAK_ARGS ?= --minutes 30
soak: $(VENV)/.installed
	$(BIN)/python -m tests.integration.soak $(SOAK_ARGS)

## fuzz: the decoder's million-input fuzz run
fuzz: $(VENV)/.installed
	$(BIN)/pytest -m slow tests/pgoutput $(PYTEST_ARGS)

## bench: the decoder and pipeline benchmarks (each prints ratios against its baseline)
bench: bench-decode bench-pipeline

bench-decode: $(VENV)/.installed
	$(BIN)/python bench/decode_bench.py

## bench-hotpath: the producer's CPU per change without the stack (Python, C, C + insert lane)
bench-hotpath: $(VENV)/.installed
	$(BIN)/python bench/hotpath_bench.py

bench-pipeline: $(VENV)/.installed
	$(BIN)/python bench/pipeline_bench.py

bench-spark: $(VENV)/.installed
	$(BIN)/python bench/spark_apply_bench.py

stack-up: $(VENV)/.installed
	$(BIN)/pgbridge dev up

stack-down: $(VENV)/.installed
	$(BIN)/pgbridge dev down

stack-status: $(VENV)/.installed
	$(BIN)/pgbridge dev status

# The C accelerator is compiled by the install: a changed source reinstalls.
$(VENV)/.installed: pyproject.toml dev-stack/check-prereqs.sh bridge/native/_speedups.c bridge/native/values.c bridge/native/values.h bridge/native/_kafka.c bridge/native/_pqread.c bridge/native/packed.h
	bash dev-stack/check-prereqs.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

clean:
	-$(BIN)/pgbridge dev down --destroy
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
