"""How `make test` spreads the integration tests over pytest-xdist's workers.

Whole modules go to one worker (``--dist loadfile``), in collection order (longest first:
``LONGEST_FIRST``). On top of that, only the first ``SPARK_WORKERS`` workers run modules that
use the ``spark`` fixture: each worker that does starts a Spark session JVM for the rest of the
run, and its JIT and collector cost more than a third such worker gains (measured: three Spark
workers were slower than two). A further worker takes the modules that need no session (Kafka
and PostgreSQL faults, failover, the replication source), which mostly wait on their
subprocesses, and the Spark workers take what is left of those once their own queue is empty.
With ``-n 2`` every worker is a Spark worker: plain ``loadfile``.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

#: Workers that may start a Spark session (xdist's gw0, gw1, ...).
SPARK_WORKERS = 2


class SparkAwareScheduling(LoadFileScheduling):
    """``loadfile``, with modules that use Spark kept on the first ``SPARK_WORKERS`` workers."""

    def __init__(self, config: pytest.Config, spark_modules: frozenset[str], log: Any) -> None:
        super().__init__(config, log)
        self.spark_modules = spark_modules

    def _runs_spark(self, node: Any) -> bool:
        return int(node.gateway.id.removeprefix("gw")) < SPARK_WORKERS

    def _next_unit_for(self, node: Any) -> str | None:
        """The first module in the queue this worker may run: a Spark worker takes the Spark
        modules first (they are the long pole), the others never take them."""
        units = list(self.workqueue)
        if self._runs_spark(node):
            spark = [unit for unit in units if unit in self.spark_modules]
            return spark[0] if spark else (units[0] if units else None)
        plain = [unit for unit in units if unit not in self.spark_modules]
        return plain[0] if plain else None

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._next_unit_for(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        )

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if self._next_unit_for(node) is None:
            # Nothing left this worker may take: it stops once its own modules are done.
            if self._pending_of(self.assigned_work[node]) == 0:
                node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        self._assign_work_unit(node)


def check_spark_modules(items: list[pytest.Item], spark_modules: frozenset[str]) -> None:
    """Every module whose tests use the ``spark`` fixture is listed, so that the scheduler
    keeps it off the workers without a session (a test outside the list would start a third
    session JVM on that worker)."""
    unlisted = sorted(
        {
            item.nodeid.split("::", 1)[0]
            for item in items
            if "spark" in getattr(item, "fixturenames", ())
        }
        - spark_modules
    )
    if unlisted:
        raise pytest.UsageError(
            "tests/conftest.py SPARK_MODULES misses modules that use the spark fixture: "
            + ", ".join(unlisted)
        )


#: Fixtures that start (or join) the local stack and its services: a test using one is an
#: integration test, which `make check` and the unit runs of `make test` leave out.
STACK_FIXTURES = frozenset({"local_stack", "spark"})


def check_stack_tests_marked(items: list[pytest.Item]) -> None:
    """Every test that uses the stack or a Spark session is marked ``integration``: unmarked,
    it runs in the unit runs too (twice in `make test`: with and without the C accelerator),
    each time starting a Spark JVM or the whole stack beside the integration run."""
    unmarked = sorted(
        item.nodeid
        for item in items
        if STACK_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("integration") is None
    )
    if unmarked:
        raise pytest.UsageError(
            "tests that use the stack or Spark must be marked integration: " + ", ".join(unmarked)
        )
