# The two commands of the README, and their parts. Everything downloads by name into ignored
# caches (.venv, ~/.cache/pip, Maven's repository, the stack cache) and is reused on later runs.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

# Python's bytecode is written and reused (in the ignored __pycache__ directories) even where
# the environment says not to: otherwise every process of a run compiles the package again and
# pytest rewrites every test module's asserts again, in each worker (collecting the suite took
# 13.7 s of CPU a process that way, 6.3 s with the bytecode kept). An empty value is "not set".
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test test-long check lint unit integration matrix soak soak-apply bench bench-decode bench-hotpath bench-pipeline bench-spark fuzz stack-up stack-down stack-status clean

# Unit tests spread over the cores (pytest-xdist); property tests run derandomized (tests/conftest.py).
UNIT := -m "not integration and not slow" -n auto -p no:cacheprovider -q

## demo: start the local stack and stream a sample database's changes through pgbridge
demo: $(VENV)/.installed .stack-prereqs
	$(BIN)/pgbridge demo

## test: on one real local stack, the integration tests, three at a time (a module's tests on
## one worker; modules using Spark on two of the three: tests/scheduling.py) with the 30 slowest
## listed, and beside them an end-to-end slice on the pure-Python path. Beside those, at a lower
## CPU priority (nice): lint, type-check and the docker-compose.yml check, and the unit tests
## (the C accelerator, then the pure-Python path a machine without a C compiler runs). The
## integration run is the long pole and leaves about a tenth of the 2 cores idle while its
## tests wait on their services: the rest takes that time instead of running before it (the
## unit tests were 2.3 of 20.6 minutes when they ran first; that this order is faster is not yet
## shown side by side: docs/measurements.md, 2026-12-03). The lint
## starts beside the stack (which mostly waits on its JVMs); the stack's log is shown if it
## fails. The fuzz run, the soak and the long integration tests have their own targets. Under
## CI the stack is stopped afterwards.
INTEGRATION := -m "integration and not slow and not long" -n 3 --dist loadfile \
	--no-loadscope-reorder --durations=30
BESIDE := nice -n 10
test: $(VENV)/.installed .stack-prereqs
	status=0; up_log=$$(mktemp); slice_log=$$(mktemp); lint_log=$$(mktemp); unit_log=$$(mktemp); \
	$(BIN)/pgbridge dev up > $$up_log 2>&1 & up=$$!; \
	$(BESIDE) $(MAKE) --no-print-directory lint > $$lint_log 2>&1 & lint=$$!; \
	wait $$up || { cat $$up_log; status=1; }; \
	{ $(BESIDE) $(BIN)/pytest $(UNIT) $(PYTEST_ARGS) && \
	  PGBRIDGE_NATIVE=0 $(BESIDE) $(BIN)/pytest $(UNIT) --ignore=tests/native $(PYTEST_ARGS); \
	} > $$unit_log 2>&1 & unit=$$!; \
	if [ $$status -eq 0 ]; then \
	  tail -n 3 $$up_log; \
	  PGBRIDGE_NATIVE=0 $(BIN)/pytest -m "integration and pure_python_slice" -q \
	    -p no:cacheprovider $(PYTEST_ARGS) > $$slice_log 2>&1 & slice=$$!; \
	  $(BIN)/pytest $(INTEGRATION) $(PYTEST_ARGS) || status=$$?; \
	  wait $$slice || status=$$?; \
	  echo "== the pure-Python slice (PGBRIDGE_NATIVE=0), run beside the integration tests:"; \
	  cat $$slice_log; \
	fi; \
	wait $$unit || status=$$?; \
	echo "== the unit tests (C accelerator, then pure Python), run beside the integration tests:"; \
	cat $$unit_log; \
	wait $$lint || { [ $$status -ne 0 ] || status=1; }; \
	echo "== lint, type-check, docker-compose.yml (run beside the stack's start):"; cat $$lint_log; \
	rm -f $$up_log $$slice_log $$lint_log $$unit_log; \
	if [ -n "$$CI" ]; then $(BIN)/pgbridge dev down; fi; \
	exit $$status

## test-long: the integration tests whose guarantee a shorter test in `make test` also checks
## (another crash point, 60 tables, every fault in one run), and the deployment modes that need
## services of their own (OAuth logins with Keycloak, every hop secured, a Spark standalone
## cluster, exactly once through a 3-broker cluster's faults): before a release, and for
## changes to recovery, snapshots, security settings or the apply job
test-long: $(VENV)/.installed .stack-prereqs
	$(BIN)/pgbridge dev up
	$(BIN)/pytest -m "integration and long" -n 2 --dist loadfile --no-loadscope-reorder \
	  --durations=10 $(PYTEST_ARGS)

## check: the edit-test loop: ruff, mypy and the unit tests (no JDK, no Maven, no stack)
check: $(VENV)/.installed
	$(BIN)/ruff check bridge tests bench
	$(BIN)/mypy
	$(BIN)/pytest $(UNIT) $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(BIN)/ruff check bridge tests bench
	$(BIN)/mypy
	bash dev-stack/compose-config.sh

unit: $(VENV)/.installed
	$(BIN)/pytest $(UNIT) $(PYTEST_ARGS)

integration: $(VENV)/.installed .stack-prereqs
	$(BIN)/pytest $(INTEGRATION) $(PYTEST_ARGS)

## matrix: the replication source's integration tests on every supported PostgreSQL major
matrix: $(VENV)/.installed .stack-prereqs
	PGBRIDGE_PG_VERSIONS=13,14,15,16,17,18 $(BIN)/pytest tests/integration/source $(PYTEST_ARGS)

## soak: 30 minutes of random faults under a writer on a rig of its own (not in CI); prints the
## table fault x recovered / time to recover / duplicates / lost. SOAK_ARGS="--minutes 5 --seed 1"
SOAK_ARGS ?= --minutes 30
soak: $(VENV)/.installed
	$(BIN)/python -m tests.integration.soak $(SOAK_ARGS)

## soak-apply: `pgbridge apply` killed, stopped by SIGTERM, its broker lost and a table's disk
## full, at random, under a writer (restarted with other settings each time); every Delta table must end equal to its
## source table. Prints each fault and how long until a batch committed again.
## APPLY_SOAK_ARGS="--minutes 30 --seed 1"
APPLY_SOAK_ARGS ?= --minutes 10
soak-apply: $(VENV)/.installed .stack-prereqs
	$(BIN)/python -m tests.integration.apply_soak $(APPLY_SOAK_ARGS)

## fuzz: the decoder's million-input fuzz run, then every property test with fresh random seeds
## (a failure prints the seed: replay it with PYTEST_ARGS=--hypothesis-seed=N)
fuzz: $(VENV)/.installed
	$(BIN)/pytest -m slow tests/pgoutput $(PYTEST_ARGS)
	$(BIN)/pytest -m "not integration and not slow" --hypothesis-profile=explore -p no:cacheprovider -q $(PYTEST_ARGS)

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

stack-up: $(VENV)/.installed .stack-prereqs
	$(BIN)/pgbridge dev up

stack-down: $(VENV)/.installed
	$(BIN)/pgbridge dev down

stack-status: $(VENV)/.installed
	$(BIN)/pgbridge dev status

# The C accelerator is compiled by the install: a changed source reinstalls. Python and a C
# compiler are all the unit tests need; the stack's Java and Maven are checked for the targets
# that start it.
$(VENV)/.installed: pyproject.toml bridge/native/_speedups.c bridge/native/values.c bridge/native/values.h bridge/native/_kafka.c bridge/native/_pqread.c bridge/native/_kafkaread.c bridge/native/_avrocols.c bridge/native/packed.h
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

.stack-prereqs: dev-stack/check-prereqs.sh
	bash dev-stack/check-prereqs.sh
	touch $@

clean:
	-$(BIN)/pgbridge dev down --destroy
	rm -rf $(VENV) .stack-prereqs .mypy_cache .ruff_cache .pytest_cache
