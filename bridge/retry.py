"""The one retry policy for transient faults of a dependency (Debezium's ``errors.*`` keys).

A transient fault (the registry refusing connections, timing out, answering 5xx or 429) makes
the bridge wait and try again instead of exiting: under systemd or Kubernetes an exit is a
crash loop with alerts, while the fault usually clears by itself. Waits grow exponentially from
``errors.retry.delay.initial.ms`` to ``errors.retry.delay.max.ms`` with full jitter (so that
many bridges do not retry in lockstep); ``errors.max.retries`` bounds the attempts (-1: no
limit, Debezium's default; 0: fail at once). Permanent faults (an incompatible schema, wrong
credentials, a missing subject) are never retried: the caller's classifier says which is which.

While it waits the caller's ``on_wait`` hook runs between sleeps (the pipeline serves Kafka's
delivery reports and keeps the replication connection alive there), nothing new is read from
PostgreSQL, so memory stays bounded and nothing past the last delivered transaction is
confirmed. Time spent waiting is counted per dependency for the metrics, and
:data:`WAITING_FOR` names what the bridge is waiting for right now (``pgbridge`` metrics/logs).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds spent waiting for each dependency since start (read by the metrics endpoint).
WAITED_SECONDS: dict[str, float] = {}
#: dependency -> what it is waiting for, while a wait is under way.
WAITING_FOR: dict[str, str] = {}

#: The longest single sleep between two ``on_wait`` calls (keepalives must not lapse).
_SLICE_S = 1.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = -1
    initial_delay_ms: int = 300
    max_delay_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.max_retries < -1:
            raise ValueError("errors.max.retries must be -1 (no limit) or at least 0")
        if not 0 < self.initial_delay_ms <= self.max_delay_ms:
            raise ValueError("errors.retry.delay.initial.ms must be > 0 and <= the maximum")

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds before retry ``attempt`` (1-based): full jitter under the exponential cap."""
        cap = min(self.max_delay_ms, self.initial_delay_ms * 2 ** min(attempt - 1, 30))
        return float(max(self.initial_delay_ms, cap * rng())) / 1000

    def run(
        self,
        dependency: str,
        what: str,
        call: Callable[[], _T],
        transient: Callable[[Exception], bool],
        *,
        on_wait: Callable[[], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> _T:
        """``call()``; on a transient error, wait and call again, up to the policy's bound.
        The last error is raised when retries run out; permanent errors at once."""
        attempt = 0
        started: float | None = None
        while True:
            try:
                result = call()
            except Exception as exc:
                if not transient(exc):
                    raise
                attempt += 1
                if self.max_retries != -1 and attempt > self.max_retries:
                    WAITING_FOR.pop(dependency, None)
                    logger.error("%s: %s; gave up after %d retries", dependency, what, attempt - 1)
                    raise
                wait = self.delay(attempt)
                started = clock() if started is None else started
                WAITING_FOR[dependency] = what
                logger.warning(
                    "%s: %s: %s (transient); retry %d%s in %.1f s",
                    dependency,
                    what,
                    exc,
                    attempt,
                    "" if self.max_retries == -1 else f" of {self.max_retries}",
                    wait,
                )
                self._wait(dependency, wait, on_wait, sleep, clock)
                continue
            if started is not None:
                WAITING_FOR.pop(dependency, None)
                logger.info(
                    "%s: %s recovered after %d retries, %.1f s",
                    dependency,
                    what,
                    attempt,
                    clock() - started,
                )
            return result

    @staticmethod
    def _wait(
        dependency: str,
        seconds: float,
        on_wait: Callable[[], None] | None,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        end = clock() + seconds
        while True:
            now = clock()
            if now >= end:
                return
            step = min(_SLICE_S, end - now)
            sleep(step)
            WAITED_SECONDS[dependency] = WAITED_SECONDS.get(dependency, 0.0) + step
            if on_wait is not None:
                on_wait()
