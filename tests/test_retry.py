"""The retry policy (pure: a fake clock and sleep)."""

from __future__ import annotations

import pytest

from bridge.retry import WAITED_SECONDS, WAITING_FOR, RetryPolicy


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Flaky:
    """Fails ``times`` times with ``error``, then answers 42; records WAITING_FOR meanwhile."""

    def __init__(self, times: int, error: Exception) -> None:
        self.times, self.error, self.calls = times, error, 0
        self.waiting_seen: list[str | None] = []

    def __call__(self) -> int:
        self.calls += 1
        self.waiting_seen.append(WAITING_FOR.get("dep"))
        if self.calls <= self.times:
            raise self.error
        return 42


def test_retry_transient_errors_are_retried_until_the_call_succeeds() -> None:
    t, flaky, waits = FakeTime(), Flaky(5, ConnectionError("refused")), []
    before = WAITED_SECONDS.get("dep", 0.0)
    result = RetryPolicy(-1, 100, 1_000).run(
        "dep", "registering s", flaky, lambda e: isinstance(e, ConnectionError),
        on_wait=lambda: waits.append(t.now), sleep=t.sleep, clock=t.clock,
    )  # fmt: skip
    assert (result, flaky.calls) == (42, 6)
    assert flaky.waiting_seen[1:] == ["registering s"] * 5  # said what it waits for
    assert "dep" not in WAITING_FOR  # and no longer once recovered
    assert waits and all(s <= 1.0 for s in t.sleeps)  # on_wait at least every second
    assert WAITED_SECONDS["dep"] - before == pytest.approx(t.now)


def test_retry_permanent_errors_are_raised_at_once() -> None:
    t, flaky = FakeTime(), Flaky(1, ValueError("incompatible"))
    with pytest.raises(ValueError, match="incompatible"):
        RetryPolicy().run("dep", "x", flaky, lambda e: isinstance(e, ConnectionError),
                          sleep=t.sleep, clock=t.clock)  # fmt: skip
    assert flaky.calls == 1 and t.sleeps == []


def test_retry_bounded_retries_give_up_with_the_last_error() -> None:
    t, flaky = FakeTime(), Flaky(10, ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        RetryPolicy(3, 100, 1_000).run("dep", "x", flaky, lambda e: True, sleep=t.sleep,
                                       clock=t.clock)  # fmt: skip
    assert flaky.calls == 4
    assert "dep" not in WAITING_FOR


@pytest.mark.parametrize("attempt", [1, 2, 5, 30, 100])
def test_retry_delay_is_jittered_between_initial_and_the_exponential_cap(attempt: int) -> None:
    policy = RetryPolicy(-1, 300, 10_000)
    cap = min(10_000, 300 * 2 ** (attempt - 1)) / 1000
    assert policy.delay(attempt, rng=lambda: 0.0) == 0.3
    assert policy.delay(attempt, rng=lambda: 1.0) == pytest.approx(max(0.3, cap))


def test_retry_policy_validates_its_bounds() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(-2)
    with pytest.raises(ValueError):
        RetryPolicy(0, 500, 100)
