"""The state file: round trip, atomic replacement, unreadable files; table states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.snapshot.plan import Chunk, TablePlan, key_chunks
from bridge.snapshot.state import (
    SnapshotState,
    StateFileError,
    TableProgress,
    load_state,
    save_state,
)


def _state() -> SnapshotState:
    keyed = TablePlan(
        table="public.big",
        schema="public",
        name="big",
        oid=16400,
        method="key",
        columns=("id", "v"),
        chunks=key_chunks([("100",), ("200",)]),
        order_columns=("id",),
        order_types=("bigint",),
        row_filter="(id > 0)",
        estimated_rows=300,
        relfilenode=16401,
    )
    keyless = TablePlan(
        table="public.log",
        schema="public",
        name="log",
        oid=16500,
        method="whole",
        columns=("msg",),
        chunks=(Chunk(0),),
        keyed=False,
        source_query="SELECT * FROM public.log WHERE msg <> ''",
    )
    return SnapshotState(
        slot="pgbridge",
        consistent_point="0/16B3748",
        run=2,
        tables=[TableProgress(keyed, {0, 2}, 200, 4096, True), TableProgress(keyless)],
    )


def test_state_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "snapshot.json"
    state = _state()
    save_state(path, state)
    assert load_state(path) == state
    assert [p.name for p in path.parent.iterdir()] == ["snapshot.json"]  # no temporary left


def test_state_table_lifecycle() -> None:
    big, log = _state().tables
    assert (big.state, log.state) == ("copying", "pending")
    assert [c.index for c in big.remaining()] == [1]
    big.done.add(1)
    assert big.state == "copied" and big.complete


def test_state_replace_keeps_old_or_new_never_torn(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    state = _state()
    save_state(path, state)
    state.status = "done"
    save_state(path, state)
    loaded = load_state(path)
    assert loaded is not None and loaded.status == "done"


def test_state_missing_file_is_none(tmp_path: Path) -> None:
    assert load_state(tmp_path / "none.json") is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"version": 99}),
        json.dumps({**_state().as_json(), "status": "weird"}),
        json.dumps(
            {
                **_state().as_json(),
                "tables": [{**_state().as_json()["tables"][0], "done": [7]}],
            }
        ),
    ],
)
def test_state_unreadable_file_is_a_typed_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(StateFileError) as info:
        load_state(path)
    assert info.value.path == path


def test_chunks_kafka_committed_after_the_file_was_written_count_as_done() -> None:
    """Exactly once (bridge.snapshot.run): the progress records of the offsets topic add the
    chunks a crash kept out of the file; names or chunks outside the plan change nothing."""
    from bridge.snapshot.run import _add_committed_chunks

    state = _state()
    _add_committed_chunks(state, {"public.big": {1, 7}, "public.gone": {0}})
    big, log = state.tables
    assert big.done == {0, 1, 2} and big.complete
    assert not log.done and not log.started


def test_an_old_state_file_gets_an_id_and_no_lanes(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    save_state(path, _state())
    raw = json.loads(path.read_text())
    del raw["id"], raw["lanes"]  # written before snapshot ids
    path.write_text(json.dumps(raw))
    loaded = load_state(path)
    assert loaded is not None and len(loaded.id) == 32 and loaded.lanes == 0
