"""Shared fixtures.

Unit tests need nothing. Integration tests (``@pytest.mark.integration``) use the real local
stack: PostgreSQL, Apache Kafka, Apicurio Registry and Spark. The ``local_stack`` fixture starts
it (or reuses a running one) and makes the test ERROR, not skip, when a part cannot start.
Outside CI the stack is left running afterwards; ``pgbridge dev down`` stops it. With
``PGBRIDGE_STACK=containers`` (a machine with a Docker engine) the same parts run as containers
through testcontainers instead.
"""

from __future__ import annotations

import fcntl
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# confluent-kafka 2.15 imports authlib's deprecated httpx integration, which warns at import;
# authlib forces that warning to "always" when imported, so filter after importing it.
from authlib.deprecate import AuthlibDeprecationWarning
from hypothesis import HealthCheck, settings

warnings.filterwarnings("ignore", category=AuthlibDeprecationWarning)

from bridge.devstack.stack import LocalStack, StackInfo  # noqa: E402

# Property tests: `make test` and `make check` run the "ci" profile, derandomized (each test's
# examples come from its name), so one commit gives one result; `make fuzz` explores with fresh
# seeds (--hypothesis-profile=explore, with --hypothesis-seed=N to replay one). A failure
# prints its reproduction blob either way. The "ci" profile has no time limits: `make test` runs
# the unit tests at a low CPU priority beside the integration tests, where an example's wall
# time says how busy the machine is, not how slow the code is (`make fuzz` keeps the limits).
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("PGBRIDGE_HYPOTHESIS_PROFILE", "ci"))

# The Spark drivers the tests start as processes (`pgbridge apply`, the job's module) live
# seconds to a minute, so the JIT's optimising tier costs more CPU than it saves: the client
# compiler only. Measured on the memory-bounded apply test (test_delta_e2e.py): 88 -> 73
# CPU-seconds at the same wall time; the suite is CPU-bound on 2 cores. Spark's launcher adds
# SPARK_SUBMIT_OPTS to the driver's java command; a value set by the caller is kept. The tests'
# own session (the ``spark`` fixture) takes the same, with options of its own (below). The
# client compiler alone gets a 48 MiB code cache by default, which a driver of a few minutes
# (the apply soak's) fills: the JVM then stops compiling and runs interpreted, each table's
# MERGE 10x slower (a soak's SIGTERM outlived its wait that way): a larger reservation, which
# costs no CPU.
SHORT_LIVED_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SHORT_LIVED_JVM_OPTIONS)


@pytest.fixture(scope="session")
def local_stack() -> Iterator[StackInfo]:
    if os.environ.get("PGBRIDGE_STACK") == "containers":  # a Docker engine: testcontainers
        from bridge.devstack.containers import start_container_stack

        info, stop = start_container_stack()
        os.environ.update(info.env)
        yield info
        stop()
        return
    stack = LocalStack(
        Path(os.environ["PGBRIDGE_STACK_DIR"]) if "PGBRIDGE_STACK_DIR" in os.environ else None
    )
    # pytest-xdist workers share one stack: the first to get here starts it, under a lock.
    with open(stack.dir / "tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        was_running = all(part["running"] for part in stack.status().values())
        info = stack.up()  # raises StackError naming the part and its log: the test errors
    os.environ.update(info.env)
    yield info
    # On a developer machine the stack stays up for the next run (and for other sessions using
    # it); CI stops what it started, unless other workers may still use it (`make test` starts
    # the stack before its workers and stops it after them).
    if not was_running and os.environ.get("CI") and "PYTEST_XDIST_WORKER" not in os.environ:
        stack.down()


@pytest.fixture(scope="session")
def spark(local_stack: StackInfo) -> Iterator[Any]:
    from bridge.spark.session import build_spark_session

    short_lived = os.environ.pop("SPARK_SUBMIT_OPTS", None)  # this JVM lives as long as the suite
    try:
        session = build_spark_session(
            "pgbridge-tests",
            jars=local_stack.spark_jars,
            master="local[2]",
            conf={
                "spark.sql.shuffle.partitions": "2",
                "spark.default.parallelism": "2",
                "spark.driver.memory": "2g",
                # The tests' own Delta reads rebuild a table's state as the job does (job_conf):
                # in one task per core, not Delta's 50.
                "spark.databricks.delta.snapshotPartitions": "2",
                # Expressions interpreted, not compiled: the tests' batches are a few rows, so
                # Janino's compile time is most of a query's (measured on six tests of
                # test_apply_batches.py: 100 -> 77 s). Same results (Spark's own suites run
                # both modes); `pgbridge apply` processes in the tests keep code generation.
                "spark.sql.codegen.wholeStage": "false",
                "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                # The throughput collector and the client compiler only (with a code cache it
                # does not fill): `make test`'s integration run is CPU-bound (2 cores at 96-99%
                # for its first 500 s), and the optimising compiler's work for the session's
                # short queries costs more than it gains. Measured, the integration run on
                # 2026-12-02's host: 890 -> 740 s, the workers' sum 2,317 -> 1,924 s (alone,
                # test_apply_batches.py took 10% longer, 17% less CPU). No effect on results.
                # TEST_SPARK_JAVA_OPTIONS measures others (not a PGBRIDGE_ name: the bridge's
                # processes refuse unknown PGBRIDGE_ variables).
                "spark.driver.extraJavaOptions": os.environ.get(
                    "TEST_SPARK_JAVA_OPTIONS",
                    "-XX:+UseParallelGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m",
                ),
            },
        )
    finally:
        if short_lived is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = short_lived
    yield session
    session.stop()


@pytest.fixture(scope="session")
def keycloak() -> Iterator[Any]:
    """A Keycloak realm (bridge.devstack.keycloak) with confidential clients ``pgbridge`` and
    ``reader`` (random secrets in ``.clients``), for the OAuth tests of Kafka and the
    registry; an error, not a skip, when it cannot start."""
    import secrets
    import tempfile

    from bridge.devstack.keycloak import KeycloakServer

    base = Path(tempfile.mkdtemp(prefix="pgbridge-keycloak-"))
    clients = {name: "oidc-" + secrets.token_hex(8) for name in ("pgbridge", "reader")}
    server = KeycloakServer(base / "keycloak", clients)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def connect_worker(
    local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A Kafka Connect worker (bridge.devstack.connect) with Debezium's connectors and
    Apicurio's converter, on the stack's broker; an error, not a skip, when it cannot start.

    Its tests, like Keycloak's, are in one module: pytest-xdist places whole modules
    (``--dist loadfile``), so a JVM like these starts once per run, not once per worker."""
    from bridge.devstack.connect import ConnectWorker

    worker = ConnectWorker(tmp_path_factory.mktemp("connect"), local_stack.bootstrap_servers)
    worker.start()  # raises StackError naming the part and its log: the test errors
    try:
        yield worker
    finally:
        worker.stop()


#: The test modules by their time in `make test`'s integration run, longest first (seconds of
#: setup + calls + teardown on a contended worker, as the run prints them per worker and module:
#: measured 2026-12-03 on a slow host, before the deployment modes moved to `make test-long`).
#: pytest-xdist hands out whole modules (`--dist loadfile`) in collection order when told not
#: to reorder them (`--no-loadscope-reorder`; by default it puts the modules with the most
#: tests first): longest first makes the workers finish together. Without it the one-test
#: modules of minutes came last and one worker ran alone for minutes (measured: the fault
#: cycle unlisted, 754 -> 817 s). A module not listed keeps its place after these.
_LONGEST_FIRST = (
    "tests/spark/test_apply_batches.py",  # 518
    "tests/integration/test_incremental_snapshot.py",  # 213
    "tests/spark/test_apply_schema_changes.py",  # 170
    "tests/integration/test_spark_apply.py",  # 158
    "tests/spark/test_changelog.py",  # 108
    "tests/spark/test_lane_batches.py",  # 99
    "tests/integration/test_connect_interop.py",  # 76
    "tests/integration/test_incremental_snapshot_control.py",  # 76
    "tests/spark/test_driver_decode.py",  # 75
    "tests/integration/test_snapshot_modes.py",  # 70
    "tests/integration/test_failover.py",  # 69
    "tests/integration/test_delta_e2e.py",  # 63
    "tests/integration/test_spark_hostile.py",  # 63
    "tests/integration/source/test_source_replication.py",  # 59
    "tests/integration/test_snapshot_exactly_once.py",  # 52
    "tests/integration/test_spark_faults.py",  # 51
    "tests/integration/test_secure_postgres.py",  # 48
    "tests/integration/test_pipeline_e2e.py",  # 44
    "tests/integration/test_secure_kafka.py",  # 44
    "tests/integration/test_snapshot_e2e.py",  # 42
    "tests/integration/test_ddl_torture.py",  # 40
    "tests/integration/test_many_tables.py",  # 32
    "tests/spark/test_driver_compaction.py",  # 28
    "tests/integration/test_secrets_masked.py",  # 23
    "tests/integration/source/test_source_errors.py",  # 23
    "tests/integration/test_hostile_schema.py",  # 22
    "tests/integration/test_exactly_once.py",  # 20
    "tests/spark/test_transforms.py",  # 19
    "tests/integration/test_type_zoo.py",  # 19
    "tests/integration/test_faults.py",  # 14
    "tests/integration/test_check.py",  # 14
    "tests/integration/test_registry.py",  # 12
    "tests/test_packaging.py",  # 11
    "tests/integration/test_column_controls.py",  # 11
    "tests/integration/test_publisher.py",  # 11
)


#: The integration modules whose tests use the ``spark`` fixture (a Spark session JVM per worker
#: that runs one): tests/scheduling.py keeps them on the first two workers. Collection fails
#: naming a module that uses the fixture and is missing here.
SPARK_MODULES = frozenset(
    f"tests/{path}.py"
    for path in (
        "integration/test_apply_soak",
        "integration/test_connect_interop",
        "integration/test_ddl_torture",
        "integration/test_delta_e2e",
        "integration/test_incremental_snapshot",
        "integration/test_many_tables",
        "integration/test_oauth_logins",
        "integration/test_routing",
        "integration/test_secure_stack",
        "integration/test_snapshot_e2e",
        "integration/test_spark_apply",
        "integration/test_spark_cluster",
        "integration/test_spark_faults",
        "integration/test_spark_hostile",
        "integration/test_stack_smoke",
        "integration/test_type_zoo",
        "spark/test_apply_batches",
        "spark/test_apply_schema_changes",
        "spark/test_changelog",
        "spark/test_debezium_types",
        "spark/test_delta_checkpoint",
        "spark/test_driver_compaction",
        "spark/test_driver_decode",
        "spark/test_history",
        "spark/test_lane_batches",
        "spark/test_set_aside",
        "spark/test_transforms",
    )
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from tests.scheduling import SparkAwareScheduling

    return SparkAwareScheduling(config, SPARK_MODULES, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.scheduling import check_spark_modules, check_stack_tests_marked

    check_spark_modules(items, SPARK_MODULES)
    check_stack_tests_marked(items)

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: every module keeps its own order


#: The fault cycle's tables (tests/integration/test_fault_cycle.py), from its reports: they
#: reach the main process from pytest-xdist's workers too.
_FAULT_TABLES: list[str] = []


#: Seconds of setup + call + teardown per (pytest-xdist worker, module), as the controller
#: receives the reports: the balance of the workers, printed after an integration run.
_MODULE_SECONDS: dict[tuple[str, str], float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":  # the teardown's report carries the same properties again
        _FAULT_TABLES.extend(str(v) for name, v in report.user_properties if name == "fault_table")
    node = getattr(report, "node", None)  # set by pytest-xdist on the controller
    if node is not None and "integration" in report.keywords:
        key = (str(node.gateway.id), report.nodeid.split("::", 1)[0])
        _MODULE_SECONDS[key] = _MODULE_SECONDS.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fault cycle's table, where it ran; each worker's modules and their seconds."""
    for table in _FAULT_TABLES:
        terminalreporter.write_sep("-", "fault cycle: fault x recovered / time / duplicates / lost")
        terminalreporter.write_line(table)
    workers = sorted({worker for worker, _ in _MODULE_SECONDS})
    if workers:
        terminalreporter.write_sep("-", "seconds per worker and module (setup + calls + teardown)")
    for worker in workers:
        modules = sorted(
            ((s, m) for (w, m), s in _MODULE_SECONDS.items() if w == worker), reverse=True
        )
        terminalreporter.write_line(f"{worker}: {sum(s for s, _ in modules):.0f} s")
        for seconds, module in modules:
            terminalreporter.write_line(f"  {seconds:7.1f}  {module}")
