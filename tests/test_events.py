"""EventBuilder: the ordered message stream -> change events (pure, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.events import (
    ChangeEvent,
    DeadLetterEvent,
    EventBuilder,
    EventError,
    LogicalMessageEvent,
    TransactionEnd,
)
from bridge.failures import FailureMode, FailurePolicy
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Origin,
    Relation,
    ReplicaIdentity,
    Truncate,
    Update,
)
from bridge.schema import KeylessTableError, SchemaError
from bridge.source.column_numbers import ColumnFacts
from bridge.types import ConversionError
from tests.rows import INT4, TEXT, lsn, relation, tuple_data

BEGIN = Begin(final_lsn=lsn("0/1000"), commit_ts=1_000_000, xid=700)
COMMIT = Commit(flags=0, commit_lsn=lsn("0/1000"), end_lsn=lsn("0/1030"), commit_ts=1_000_000)


def _run(builder: EventBuilder, *messages: object) -> list[object]:
    out: list[object] = []
    for m in messages:
        out += builder.feed(m)  # type: ignore[arg-type]
    return out


def test_event_builder_insert_update_delete_in_order_with_seq() -> None:
    b = EventBuilder("app")
    out = _run(
        b,
        relation(),
        BEGIN,
        Insert(None, 16384, tuple_data("1", "a")),
        Update(None, 16384, None, None, tuple_data("1", "b")),
        Delete(None, 16384, "K", tuple_data("1", None)),
        COMMIT,
    )
    changes = [e for e in out if isinstance(e, ChangeEvent)]
    assert [(e.op, e.seq) for e in changes] == [("c", 0), ("u", 1), ("d", 2)]
    assert changes[0].after == {"id": 1, "body": "a"} and changes[0].before is None
    assert changes[1].before is None and changes[1].after == {"id": 1, "body": "b"}
    assert changes[2].before == {"id": 1, "body": None} and changes[2].after is None
    assert all(e.key == {"id": 1} for e in changes)
    assert all(e.tx.commit_lsn == lsn("0/1000") and e.tx.xid == 700 for e in changes)
    assert changes[0].table.topic == "app.public.items"
    end = out[-1]
    assert isinstance(end, TransactionEnd)
    assert end.end_lsn == lsn("0/1030") and end.events == 3
    assert end.per_table == {"public.items": 3}


def test_event_builder_key_change_becomes_delete_then_create() -> None:
    b = EventBuilder("app")
    out = _run(
        b,
        relation(),
        BEGIN,
        Update(None, 16384, "K", tuple_data("1", None), tuple_data("2", "x")),
        COMMIT,
    )
    changes = [e for e in out if isinstance(e, ChangeEvent)]
    assert [(e.op, e.key) for e in changes] == [("d", {"id": 1}), ("c", {"id": 2})]
    assert [e.seq for e in changes] == [0, 1]


def test_event_builder_full_identity_update_carries_whole_old_row() -> None:
    b = EventBuilder("app")
    rel = relation(
        identity=ReplicaIdentity.FULL, columns=(("id", INT4, True), ("body", TEXT, True))
    )
    out = _run(
        b,
        rel,
        BEGIN,
        Update(None, 16384, "O", tuple_data("1", "old"), tuple_data("1", "new")),
        COMMIT,
    )
    change = out[0]
    assert isinstance(change, ChangeEvent) and change.op == "u"
    assert change.before == {"id": 1, "body": "old"} and change.after == {"id": 1, "body": "new"}


def test_event_builder_unchanged_toast_is_listed_not_null() -> None:
    b = EventBuilder("app")
    out = _run(
        b,
        relation(),
        BEGIN,
        Update(None, 16384, None, None, tuple_data("1", None, unchanged=(1,))),
        COMMIT,
    )
    change = out[0]
    assert isinstance(change, ChangeEvent)
    assert change.unchanged_toast == ("body",)
    assert change.after is not None and change.after["body"] == "__debezium_unavailable_value"


def test_event_builder_truncate_emits_one_event_per_table() -> None:
    b = EventBuilder("app")
    out = _run(
        b, relation(), relation(oid=2, name="other"), BEGIN, Truncate(None, 3, (16384, 2)), COMMIT
    )
    changes = [e for e in out if isinstance(e, ChangeEvent)]
    assert [(e.op, e.table.table, e.key) for e in changes] == [
        ("t", "public.items", None),
        ("t", "public.other", None),
    ]


def test_event_builder_transactional_and_plain_messages() -> None:
    b = EventBuilder("app")
    plain = Message(None, False, lsn("0/900"), "audit", b"x")
    tx_msg = Message(None, True, lsn("0/1010"), "audit", b"y")
    out = _run(b, plain, BEGIN, tx_msg, COMMIT)
    first, second = out[0], out[1]
    assert isinstance(first, LogicalMessageEvent) and first.tx is None
    assert isinstance(second, LogicalMessageEvent) and second.tx is not None and second.seq == 0


def test_event_builder_origin_is_attached_to_transaction() -> None:
    b = EventBuilder("app")
    out = _run(
        b,
        relation(),
        BEGIN,
        Origin(lsn("0/1000"), "upstream"),
        Insert(None, 16384, tuple_data("1", "a")),
        COMMIT,
    )
    assert isinstance(out[0], ChangeEvent) and out[0].tx.origin == "upstream"


def test_event_builder_unknown_relation_is_a_typed_error() -> None:
    b = EventBuilder("app")
    b.feed(BEGIN)
    with pytest.raises(EventError, match="relation OID 99 was never described"):
        b.feed(Insert(None, 99, tuple_data("1", "a")))


def test_event_builder_change_outside_transaction_is_a_typed_error() -> None:
    b = EventBuilder("app")
    b.feed(relation())
    with pytest.raises(EventError, match="outside Begin"):
        b.feed(Insert(None, 16384, tuple_data("1", "a")))


def test_event_builder_commit_not_matching_begin_is_a_typed_error() -> None:
    b = EventBuilder("app")
    b.feed(BEGIN)
    with pytest.raises(EventError, match="does not match Begin"):
        b.feed(Commit(0, lsn("0/2000"), lsn("0/2030"), 1))


def test_event_builder_table_without_key_has_null_keys_by_default() -> None:
    b = EventBuilder("app")
    out = _run(
        b,
        relation(identity=ReplicaIdentity.NOTHING, columns=(("id", INT4, False),)),
        BEGIN,
        Insert(None, 16384, tuple_data("1")),
        COMMIT,
    )
    assert isinstance(out[0], ChangeEvent) and out[0].key is None


def test_event_builder_keyless_fail_mode_is_a_typed_error() -> None:
    b = EventBuilder("app", keyless="fail")
    with pytest.raises(KeylessTableError):
        b.feed(relation(identity=ReplicaIdentity.NOTHING, columns=(("id", INT4, False),)))


_FULL = (("id", INT4, True), ("body", TEXT, True))


def _full_table_key(
    b: EventBuilder, columns: tuple[tuple[str, int, bool], ...], *values: str
) -> Any:
    """The key of one insert into a REPLICA IDENTITY FULL table of ``columns``."""
    out = _run(
        b,
        relation(identity=ReplicaIdentity.FULL, columns=columns),
        BEGIN,
        Insert(None, 16384, tuple_data(*values)),
        COMMIT,
    )
    assert isinstance(out[0], ChangeEvent)
    return out[0].key


def test_event_builder_message_key_columns_key_a_full_table() -> None:
    def key_columns(schema: str, table: str) -> tuple[str, ...] | None:
        return ("body",) if (schema, table) == ("public", "items") else None

    assert _full_table_key(EventBuilder("app", key_columns=key_columns), _FULL, "1", "a") == {
        "body": "a"
    }


def test_event_builder_keys_a_full_table_by_its_primary_key_and_keeps_it_without_the_catalog() -> (
    None
):
    """A REPLICA IDENTITY FULL table is keyed by the catalog's primary key (ColumnNumbers reads
    it with the column numbers); when the catalog cannot be read for a later version, the key
    read last stays, so the table's key does not come and go."""
    answers = [
        ColumnFacts(catalog=(("id", 1, INT4, None), ("body", 2, TEXT, None)), primary_key=("id",)),
        ColumnFacts(),  # the catalog read failed
    ]
    b = EventBuilder("app", column_numbers=lambda relation: answers.pop(0))
    assert _full_table_key(b, _FULL, "1", "a") == {"id": 1}
    assert _full_table_key(b, (*_FULL, ("note", TEXT, True)), "2", "b", "n") == {"id": 2}
    assert not answers


def test_event_builder_unconvertible_value_fails_in_fail_mode() -> None:
    b = EventBuilder("app", failures=FailurePolicy("fail"))
    _run(b, relation(), BEGIN)
    with pytest.raises(ConversionError) as info:
        b.feed(Insert(None, 16384, tuple_data("not a number", "a")))
    assert info.value.table == "public.items" and info.value.column == "id"


@pytest.mark.parametrize("mode", ["warn", "skip"])
def test_event_builder_unconvertible_change_becomes_one_dead_letter_and_keeps_seq(
    mode: FailureMode,
) -> None:
    b = EventBuilder("app", failures=FailurePolicy(mode, "app.dead_letter"))
    out = _run(
        b,
        relation(),
        BEGIN,
        Insert(None, 16384, tuple_data("1", "a")),
        Update(None, 16384, "O", tuple_data("1", "a"), tuple_data("x", "b")),
        Insert(None, 16384, tuple_data("2", "c")),
        COMMIT,
    )
    kinds = [(type(e).__name__, getattr(e, "seq", None)) for e in out]
    assert kinds == [
        ("ChangeEvent", 0),
        ("DeadLetterEvent", 1),
        ("ChangeEvent", 2),
        ("TransactionEnd", None),
    ]
    dead = out[1]
    assert isinstance(dead, DeadLetterEvent)
    assert dead.op == "u" and dead.error.column == "id"
    assert dead.after is not None and dead.after.buffer.find(b"x") >= 0
    end = out[-1]
    assert isinstance(end, TransactionEnd) and end.events == 3


def test_event_builder_repeated_relation_keeps_table_version() -> None:
    b = EventBuilder("app")
    b.feed(relation())
    first = b.relations[16384]
    b.feed(relation())
    assert b.relations[16384] is first
    b.feed(relation(columns=(("id", INT4, True), ("body", TEXT, False), ("extra", TEXT, False))))
    assert b.relations[16384] is not first
    assert b.relations[16384].field_names == ("id", "body", "extra")


def test_event_builder_two_tables_sharing_a_topic_is_a_typed_error() -> None:
    b = EventBuilder("app")
    b.feed(relation(oid=1, name="a b"))
    b.feed(relation(oid=1, name="a b"))  # the same table again is fine
    with pytest.raises(SchemaError, match=r"also the topic of table public\.a b"):
        b.feed(relation(oid=2, name="a_b"))


@pytest.mark.parametrize(
    ("missing", "warned"), [({}, True), ({"added": "5"}, False)], ids=["volatile", "constant"]
)
def test_a_column_added_with_a_default_older_rows_never_received_is_warned_of(
    caplog: pytest.LogCaptureFixture, missing: dict[str, str], warned: bool
) -> None:
    """ADD COLUMN ... DEFAULT clock_timestamp() rewrites the table without sending its rows:
    the log says so, and what to do; a constant default (a missing value) is carried instead."""
    from bridge.source.column_numbers import ColumnFacts

    v1 = relation()
    v2 = relation(columns=(("id", INT4, True), ("body", TEXT, False), ("added", INT4, False)))
    facts = {
        v1: ColumnFacts({"id": 1, "body": 2}),
        v2: ColumnFacts({"id": 1, "body": 2, "added": 3}, missing, frozenset({"added"})),
    }
    b = EventBuilder("app", column_numbers=lambda r: facts[r])
    _run(b, v1, BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)
    with caplog.at_level("WARNING", logger="bridge.events"):
        _run(b, v2)
    messages = [r.getMessage() for r in caplog.records if "incremental snapshot" in r.getMessage()]
    assert bool(messages) is warned
    if warned:
        assert "public.items" in messages[0] and "['added']" in messages[0]


def test_a_column_whose_type_changed_is_warned_of_with_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ALTER COLUMN ... TYPE rewrites the table without sending its rows."""
    b = EventBuilder("app")
    _run(b, relation(), BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)
    with caplog.at_level("WARNING", logger="bridge.events"):
        _run(b, relation(columns=(("id", INT4, True), ("body", INT4, False))))
    (message,) = [r.getMessage() for r in caplog.records if "changed type" in r.getMessage()]
    assert "public.items" in message and "['body']" in message
    assert "incremental snapshot" in message


def test_a_renamed_table_is_warned_of_with_its_old_topic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ALTER TABLE items RENAME TO things: a new topic from here on; the log names the old."""
    b = EventBuilder("app")
    _run(b, relation(), BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)
    with caplog.at_level("WARNING", logger="bridge.events"):
        out = _run(b, relation(name="things"), BEGIN, Insert(None, 16384, tuple_data("2", "b")),
                   COMMIT)  # fmt: skip
    (message,) = [r.getMessage() for r in caplog.records if "RENAME TO" in r.getMessage()]
    assert "public.items is now public.things" in message and "app.public.items" in message
    changes = [e for e in out if isinstance(e, ChangeEvent)]
    assert changes[0].table.topic == "app.public.things"


@pytest.mark.parametrize(
    ("second", "table"),
    [
        (relation(columns=(("id", INT4, True), ("body", INT4, False))), "public.items"),
        (relation(name="things"), "public.things"),
        (relation(columns=(("id", INT4, True), ("body", TEXT, True))), None),  # identity only
        (relation(), None),  # the same version again
    ],
    ids=["type changed", "renamed", "not rewritten", "repeated"],
)
def test_a_rewritten_table_is_reported_once_under_an_id_a_replay_repeats(
    caplog: pytest.LogCaptureFixture, second: Relation, table: str | None
) -> None:
    """snapshot.rewritten.tables = incremental: the builder tells on_rewrite which table to copy
    again, under an id made of its OID and the transaction the new Relation came in (a replay
    of the stream makes the same id, so the request is acted on once; the table's next rewrite,
    in another transaction, makes a new one); the warning says the snapshot is requested
    instead of asking for one."""
    later = Begin(final_lsn=lsn("0/5000"), commit_ts=2_000_000, xid=701)

    def replay() -> list[tuple[str, str]]:
        told: list[tuple[str, str]] = []
        b = EventBuilder("app")
        b.on_rewrite = lambda name, signal_id: told.append((name, signal_id))
        _run(b, relation(), BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)
        b.message_lsn = 0  # what a Relation frame may carry: not an identity
        _run(b, later, second)
        return told

    with caplog.at_level("WARNING", logger="bridge.events"):
        told = replay()
    if table is None:
        assert told == []
        return
    assert told == [(table, "rewrite-16384-0/5000")]
    assert replay() == told
    assert any("is requested (snapshot.rewritten.tables)" in r.getMessage() for r in caplog.records)


def test_schemas_for_a_snapshot_reader_never_requests_a_snapshot() -> None:
    """The incremental snapshot's reader asks for a newer version's schemas (schemas_for): that
    is no DDL seen by the stream, so nothing is requested."""
    told: list[tuple[str, str]] = []
    b = EventBuilder("app")
    b.on_rewrite = lambda name, signal_id: told.append((name, signal_id))
    _run(b, relation(), BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)
    b.schemas_for(relation(columns=(("id", INT4, True), ("body", INT4, False))))
    assert told == []


def test_a_rename_in_a_burst_of_ddl_is_still_a_rename() -> None:
    """RENAME COLUMN body TO text2, then more DDL before the stream decodes the next change: the
    catalog no longer describes the message, yet its number for text2 is body's, so the value
    schema gives text2 body's number, and the registry step (carry_renames) says text2 was body
    (aliases, pgbridge.renamed_from), not a drop and an add."""
    from bridge.schema_versions import carry_renames, row_record
    from bridge.source.column_numbers import ColumnFacts

    v1 = relation()
    v2 = relation(columns=(("id", INT4, True), ("text2", TEXT, False)))
    moved_on = (("id", 1, INT4, None), ("text2", 2, TEXT, None), ("later", 3, INT4, None))
    facts = {v1: ColumnFacts({"id": 1, "body": 2}), v2: ColumnFacts(catalog=moved_on)}
    b = EventBuilder("app", column_numbers=lambda r: facts[r])
    _run(b, v1, BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)
    first = b.relations[16384].value_schema
    _run(b, v2)
    new = b.relations[16384].value_schema
    row = row_record(carry_renames(first, new))
    assert row is not None
    (field,) = [f for f in row["fields"] if f["name"] == "text2"]
    assert field["aliases"] == ["body"] and field["pgbridge.renamed_from"] == ["body"]
