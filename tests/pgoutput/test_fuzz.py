"""Fuzz tests: random and mutated payloads raise DecodeError or decode, never anything else."""

from __future__ import annotations

import pytest

from .fuzz import run_fuzz


def test_decoder_fuzz_raises_only_decode_error() -> None:
    r = run_fuzz(50_000, seed=1)
    assert r.failures == []
    assert r.inputs == 50_000
    # Both outcomes must be exercised, or the mutations are too mild or too wild to test much.
    assert r.decoded > 1_000 and r.decode_errors > 10_000


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_decoder_fuzz_million_inputs_raise_only_decode_error() -> None:
    r = run_fuzz(1_000_000, seed=2)
    assert r.failures == []
    assert r.inputs == 1_000_000
