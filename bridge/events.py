"""Change events: decoded messages + the relation cache -> one event per row change.

Pure (no I/O), shared by streaming and (later) the snapshot, so the stages after it never care
where a row came from. :class:`EventBuilder` is fed the source's messages in commit order
(``Begin … Commit``, see :mod:`bridge.source.api`) and returns what each one produces:

- :class:`ChangeEvent` for Insert (``c``), Update (``u``), Delete (``d``) and, per table,
  Truncate (``t``). An update that changes the key (an old ``K`` tuple) becomes a delete of the
  old key followed by a create, as Debezium does, so each key's history stays on its partition.
- :class:`LogicalMessageEvent` for ``pg_logical_emit_message`` (``m``).
- :class:`DeadLetterEvent` in place of a change whose values cannot be converted, when the
  failure policy (:mod:`bridge.failures`) sets such changes aside rather than stopping; it keeps
  the change's ``seq``, so positions stay the same whichever policy is in force.
- :class:`TransactionEnd` at Commit: the position to acknowledge once everything before it was
  delivered, with per-table counts for the optional transaction-metadata topic.

``seq`` numbers the events of a transaction from 0, so ``(commit_lsn, seq)`` is a total order of
all changes that consumers can deduplicate by (a restart may resend, never skip).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bridge.column_controls import ColumnControls
from bridge.errors import PgBridgeError
from bridge.failures import FailurePolicy
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    Truncate,
    TupleData,
    Type,
    Update,
)
from bridge.relation_memory import RelationMemory, RememberedRelation
from bridge.routing import TopicRouter
from bridge.schema import (
    ATTNUM,
    KeylessMode,
    RelationSchemas,
    SchemaError,
    TableHints,
    relation_schemas,
    topic_name,
)
from bridge.schema_versions import numbered_columns, row_record
from bridge.source.column_numbers import ColumnFacts, inferred_numbers
from bridge.types import TypeMapper
from bridge.types.errors import ConversionError

logger = logging.getLogger(__name__)

Op = Literal["c", "u", "d", "t", "r"]


class EventError(PgBridgeError):
    """The message stream is inconsistent (a change for a relation never described, a change
    outside a transaction); ``where`` says which message and position."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


@dataclass(frozen=True, slots=True)
class TxContext:
    """The transaction a change belongs to."""

    xid: int
    commit_lsn: Lsn
    commit_ts: int  # microseconds since 2000-01-01 UTC, as the protocol sends it
    origin: str | None = None
    #: The source block's ``snapshot`` field: "false" for streamed changes; "first", "true",
    #: "last" for snapshot rows (op ``r``, bridge.snapshot), whose commit_lsn is the snapshot's
    #: consistent point.
    snapshot: str = "false"
    #: The end LSN of the transaction committed before this one on the stream (where a
    #: consumer that had applied it would resume): the first element of Debezium's
    #: ``source.sequence``; None when not known.
    last_commit_lsn: Lsn | None = None


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    op: Op
    table: RelationSchemas  # the table version the row was encoded with
    tx: TxContext
    seq: int
    before: Mapping[str, Any] | None  # a dict, or an EncodedRow (bridge.schema)
    after: Mapping[str, Any] | None
    unchanged_toast: tuple[str, ...] = ()
    #: The LSN of the change's own WAL record (Debezium's ``source.lsn``); for snapshot rows
    #: the position they are published at. Orders nothing across transactions: (tx.commit_lsn,
    #: seq) does.
    lsn: int = 0

    @property
    def key(self) -> dict[str, Any] | None:
        """The key record; ``None`` for truncates and keyless tables."""
        row = self.after if self.after is not None else self.before
        return None if row is None else self.table.key_of(row)


# The bulk-load hot path builds a ChangeEvent per row: writing its slots through their
# descriptors builds the identical frozen object (there is no __post_init__) in about half the
# time of the generated __init__, which goes through object.__setattr__ per field.
_new_object = object.__new__
CHANGE_SETTERS = tuple(
    vars(ChangeEvent)[name].__set__
    for name in ("op", "table", "tx", "seq", "before", "after", "unchanged_toast", "lsn")
)


def new_insert_event(
    table: RelationSchemas,
    tx: TxContext,
    seq: int,
    after: Mapping[str, Any],
    toast: tuple[str, ...],
    lsn: int,
) -> ChangeEvent:
    """``ChangeEvent("c", table, tx, seq, None, after, toast, lsn)``, faster."""
    event: ChangeEvent = _new_object(ChangeEvent)
    s_op, s_table, s_tx, s_seq, s_before, s_after, s_toast, s_lsn = CHANGE_SETTERS
    s_op(event, "c")
    s_table(event, table)
    s_tx(event, tx)
    s_seq(event, seq)
    s_before(event, None)
    s_after(event, after)
    s_toast(event, toast)
    s_lsn(event, lsn)
    return event


@dataclass(frozen=True, slots=True)
class LogicalMessageEvent:
    message: Message
    tx: TxContext | None  # None for a non-transactional message
    seq: int


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    tx: TxContext
    end_lsn: Lsn  # what may be confirmed once this and all earlier transactions are delivered
    events: int
    #: Changes per table (EventBuilder.count_tables; empty when not counted).
    per_table: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeadLetterEvent:
    """A change the failure policy set aside: the raw tuples as the server sent them and why."""

    op: Op
    table: RelationSchemas
    tx: TxContext
    seq: int
    before: TupleData | None
    after: TupleData | None
    error: ConversionError


Output = ChangeEvent | LogicalMessageEvent | TransactionEnd | DeadLetterEvent


def remembered(schemas: RelationSchemas) -> RememberedRelation:
    """What the rewrite check compares of a table version (kept across restarts)."""
    relation = schemas.relation
    row = row_record(schemas.value_schema)
    return RememberedRelation(
        relation.namespace,
        relation.relation_name,
        schemas.table,
        schemas.topic,
        tuple((c.name, c.type_oid) for c in relation.columns),
        tuple(f.get(ATTNUM) for f in row["fields"]) if row else (),
    )


class EventBuilder:
    """Turns the ordered message stream into events; keeps the relation and type caches."""

    def __init__(
        self,
        topic_prefix: str,
        mapper: TypeMapper | None = None,
        *,
        hints: dict[str, TableHints] | None = None,
        keyless: KeylessMode = "null_key",
        key_columns: Callable[[str, str], tuple[str, ...] | None] | None = None,
        failures: FailurePolicy | None = None,
        column_numbers: Callable[[Relation], ColumnFacts] | None = None,
        column_controls: ColumnControls | None = None,
        router: TopicRouter | None = None,
    ) -> None:
        """``hints`` by ``schema.table``; ``key_columns(schema, table)`` the configured message
        key columns of a table (``message.key.columns``), if any; ``failures`` decides what
        happens to a change that cannot be converted (default: stop with the typed error);
        ``column_numbers(relation)`` its columns' attribute numbers and missing values (empty:
        not known), read from the catalog when a table version's schemas are built (renames
        are told by the numbers; a column added with a default gets it as its Avro default);
        ``column_controls``: the columns left out, masked, hashed or cut (Debezium's
        ``column.*`` settings, :mod:`bridge.column_controls`); ``router``: tables sharing a
        topic (Debezium's ``topic.regex``, :mod:`bridge.routing`)."""
        self.topic_prefix = topic_prefix
        self.column_controls = column_controls
        self.router = router
        self.mapper = mapper or TypeMapper()
        self.hints = hints or {}
        self.keyless: KeylessMode = keyless
        self.key_columns = key_columns
        self.failures = failures or FailurePolicy("fail")
        self.column_numbers = column_numbers
        self._primary_keys: dict[int, tuple[str, ...]] = {}  # relation OID -> catalog's key
        self.relations: dict[int, RelationSchemas] = {}
        self._topic_owners: dict[str, str] = {}  # topic -> the "schema.table" it belongs to
        self._tx: TxContext | None = None
        self._begin: Begin | None = None
        self._origin: str | None = None
        self._seq = 0
        self._counts: Counter[str] = Counter()
        #: Whether to count each transaction's changes per table (TransactionEnd.per_table,
        #: which only transaction metadata records read): off, it is always empty.
        self.count_tables = True
        #: The WAL position of the message being fed (its XLogData's start), set by the caller
        #: before :meth:`feed`: the ``lsn`` of the changes it makes.
        self.message_lsn = 0
        #: The end LSN of the last transaction committed on the stream: None until the first
        #: Commit, as in Debezium's ``source.sequence`` after a fresh start.
        self.last_commit_lsn: Lsn | None = None
        #: Told ``(schema.table, id)`` when DDL rewrote a table's rows without sending them
        #: (a column's type changed, a column added with a volatile default, the table renamed
        #: or moved to another schema): the id is the same whenever the stream is replayed
        #: (the table's OID and the WAL position of its new Relation message).
        self.on_rewrite: Callable[[str, str], None] | None = None
        #: The relations delivered before this process started (bridge.relation_memory): a
        #: table's first Relation after a restart is compared with it.
        self.memory: RelationMemory | None = None
        self._handlers: dict[type, Callable[[Any], list[Output]]] = {
            Insert: self._insert,
            Update: self._update,
            Delete: self._delete,
            Begin: self._begin_tx,
            Commit: self._commit,
            Relation: self._relation,
            Type: self._type,
            Truncate: self._truncate,
            Message: self._logical_message,
            Origin: self._origin_message,
        }

    def feed(self, message: LogicalMessage) -> list[Output]:
        """The events one message produces (often one, none for catalog messages)."""
        handler = self._handlers.get(type(message))
        if handler is None:
            # Stream and two-phase messages are resolved by the source before they get here.
            raise EventError(type(message).__name__, "not expected after the source's assembly")
        return handler(message)

    # -- per message --------------------------------------------------------------------------

    def _insert(self, message: Insert) -> list[Output]:
        # The hot path of a bulk load: _table and _change inlined.
        table = self.relations.get(message.relation_oid) or self._table(
            message.relation_oid, "Insert"
        )
        try:
            after, toast = table.encoder.encode(message.new_tuple)
        except ConversionError as exc:
            return [self._dead_letter("c", table, None, message.new_tuple, exc)]
        tx = self._tx or self._require_tx(table.table)
        seq = self._seq
        self._seq = seq + 1
        if self.count_tables:
            self._counts[table.table] += 1
        return [
            new_insert_event(table, tx, seq, after, tuple(toast) if toast else (), self.message_lsn)
        ]

    def _delete(self, message: Delete) -> list[Output]:
        table = self._table(message.relation_oid, "Delete")
        try:
            before, _ = table.encoder.encode(message.old_tuple)
        except ConversionError as exc:
            return [self._dead_letter("d", table, message.old_tuple, None, exc)]
        return [self._change("d", table, before, None, ())]

    def _truncate(self, message: Truncate) -> list[Output]:
        return [
            self._change("t", self._table(oid, "Truncate"), None, None, ())
            for oid in message.relation_oids
        ]

    def _begin_tx(self, message: Begin) -> list[Output]:
        self._begin, self._seq, self._counts = message, 0, Counter()
        self._tx = TxContext(
            message.xid,
            message.final_lsn,
            message.commit_ts,
            self._origin,
            last_commit_lsn=self.last_commit_lsn,
        )
        return []

    def _type(self, message: Type) -> list[Output]:
        self.mapper.observe(message)
        return []

    def _origin_message(self, message: Origin) -> list[Output]:
        # Origin follows Begin: it names where the transaction was replicated from.
        self._origin = message.name
        if self._tx is not None:
            tx = self._tx
            self._tx = replace(tx, origin=message.name)
        return []

    def _relation(self, relation: Relation) -> list[Output]:
        schema = relation.namespace or "pg_catalog"
        table = f"{schema}.{relation.relation_name}"
        known = self.relations.get(relation.relation_oid)
        if known is not None and replace(known.relation, xid=None) == replace(relation, xid=None):
            return []  # the server repeats Relation messages (reconnects, streams): no change
        schemas = self._schemas(relation, report_rewrite=True)
        owner = self._topic_owners.setdefault(schemas.topic, table)
        routed = schemas.topic != topic_name(self.topic_prefix, relation)  # shared on purpose
        if owner != table and not routed:
            # Two tables whose names differ only in characters Kafka refuses ("a b" and a_b):
            # mixing them in one topic would corrupt both, and a renamed topic would move
            # with the order in which tables first change. Say so instead.
            raise SchemaError(
                table,
                f"its topic {schemas.topic} is also the topic of table {owner}; rename one of "
                "them or leave one out with table.exclude.list",
            )
        self.relations[relation.relation_oid] = schemas
        if self.memory is not None:
            self.memory.saw(self.message_lsn, relation.relation_oid, remembered(schemas))
        return []

    def schemas_for(self, relation: Relation) -> RelationSchemas:
        """The schemas of ``relation`` as this builder makes them, without caching them: for a
        reader of a table's current rows while the stream may still be at an older version of
        it (bridge.snapshot.incremental). The cached object when the stream's is the same."""
        known = self.relations.get(relation.relation_oid)
        if known is not None and replace(known.relation, xid=None) == replace(relation, xid=None):
            return known
        return self._schemas(relation)

    def _schemas(self, relation: Relation, *, report_rewrite: bool = False) -> RelationSchemas:
        schema = relation.namespace or "pg_catalog"
        hints = self.hints.get(f"{schema}.{relation.relation_name}")
        key_columns = self.key_columns(schema, relation.relation_name) if self.key_columns else None
        if key_columns is not None:
            hints = replace(hints or TableHints(), key_columns=key_columns)
        facts = self.column_numbers(relation) if self.column_numbers else ColumnFacts()
        known = self.relations.get(relation.relation_oid)
        if not facts.numbers and facts.catalog and known is not None:
            # The catalog moved on since this message (DDL in a burst): what can be proved.
            numbers = inferred_numbers(
                numbered_columns(known.value_schema),
                [column.name for column in relation.columns],
                facts.catalog,
            )
            facts = replace(facts, numbers=numbers)
        resnapshot = report_rewrite and self.on_rewrite is not None
        previous = (
            remembered(known)
            if known is not None
            else self.memory.known.get(relation.relation_oid)
            if self.memory is not None and report_rewrite
            else None
        )
        rewritten = self._warn_of_rewritten_rows(relation, facts, previous, resnapshot)
        if rewritten and resnapshot and self.on_rewrite is not None:
            table = f"{relation.namespace or 'pg_catalog'}.{relation.relation_name}"
            # Named by the transaction it arrived in: the same when the slot replays it, a new
            # one for the table's next rewrite (a Relation message carries no LSN of its own).
            where = self._tx.commit_lsn if self._tx is not None else self.message_lsn
            self.on_rewrite(table, f"rewrite-{relation.relation_oid}-{where}")
        if facts.numbers:
            hints = replace(
                hints or TableHints(), column_numbers=facts.numbers, missing_values=facts.missing
            )
        # The primary key by name (a REPLICA IDENTITY FULL table is keyed by it): when the
        # catalog cannot be read, the one read last, so the table's key does not come and go.
        if facts.catalog:
            self._primary_keys[relation.relation_oid] = facts.primary_key
        primary_key = self._primary_keys.get(relation.relation_oid, ())
        if primary_key:
            hints = replace(hints or TableHints(), primary_key=primary_key)
        return relation_schemas(
            relation,
            self.mapper,
            topic_prefix=self.topic_prefix,
            hints=hints,
            keyless=self.keyless,
            controls=self.column_controls,
            router=self.router,
        )

    def _warn_of_rewritten_rows(
        self,
        relation: Relation,
        facts: ColumnFacts,
        known: RememberedRelation | None,
        resnapshot: bool = False,
    ) -> bool:
        """Whether DDL rewrote the table without sending its rows: a column added with a
        default PostgreSQL computes per row (a volatile one: ``random()``,
        ``clock_timestamp()``), a column's type changed, or the table was renamed or moved
        (its rows stay in the old topic). The rows then hold values no consumer saw. Said once,
        when the new version is built, with the fix; ``resnapshot``: the caller requests an
        incremental snapshot of the table. (A column added without a default and given one
        later looks the same here, hence "if".)"""
        if known is None:
            return False
        fix = (
            "an incremental snapshot of the table is requested (snapshot.rewritten.tables)"
            if resnapshot
            else "run an incremental snapshot of the table (or set snapshot.rewritten.tables = "
            "incremental; docs/snapshots.md)"
        )
        if (known.namespace, known.relation_name) != (relation.namespace, relation.relation_name):
            logger.warning(
                "table %s is now %s.%s (ALTER TABLE ... RENAME TO / SET SCHEMA): its changes go "
                "to a new topic from here; the rows it held are in topic %s (and that Delta "
                "table): %s to copy them over",
                known.table,
                relation.namespace,
                relation.relation_name,
                known.topic,
                fix,
            )
            return True
        before = set(known.attnums)
        old_types = dict(known.columns)
        added = sorted(
            name
            for name in facts.defaulted - facts.missing.keys()
            if facts.numbers.get(name) not in before
        )
        retyped = sorted(
            column.name
            for column in relation.columns
            if column.name in old_types
            and old_types[column.name] != column.type_oid  # a modifier alone keeps the values
        )
        if retyped:
            logger.warning(
                "%s: columns %s changed type; consumers hold their old values cast (the Spark "
                "job casts them) until a row changes: if the ALTER's USING computed something "
                "else, %s",
                known.table,
                retyped,
                fix,
            )
        volatile = bool(added) and None not in before
        if volatile:
            logger.warning(
                "%s: columns %s were added with a default and rows written before hold no "
                "value of it in the change events; if the default was volatile (PostgreSQL "
                "then rewrote the rows without sending them), %s",
                known.table,
                added,
                fix,
            )
        return bool(retyped) or volatile

    def _update(self, message: Update) -> list[Output]:
        table = self._table(message.relation_oid, "Update")
        try:
            after, toast = table.encoder.encode(message.new_tuple)
            before = self._old_row(table, message.old_tuple)
        except ConversionError as exc:
            return [self._dead_letter("u", table, message.old_tuple, message.new_tuple, exc)]
        # An old 'K' tuple comes only when the identity changed; an 'O' tuple (FULL) comes
        # always, and its key (message.key.columns) may or may not have changed.
        if (
            before is not None
            and table.key_schema is not None
            and self._key_changed(table, before, after)
        ):
            # The key changed: delete the old key, create the new one (Debezium's behaviour).
            return [
                self._change("d", table, before, None, ()),
                self._change("c", table, None, after, toast),
            ]
        return [self._change("u", table, before, after, toast)]

    @staticmethod
    def _old_row(table: RelationSchemas, old: TupleData | None) -> Mapping[str, Any] | None:
        if old is None:
            return None
        row, _ = table.encoder.encode(old)
        return row

    @staticmethod
    def _key_changed(
        table: RelationSchemas, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> bool:
        return table.key_of(before) != table.key_of(after)

    def _logical_message(self, message: Message) -> list[Output]:
        if not message.transactional:
            return [LogicalMessageEvent(message, None, 0)]
        event = LogicalMessageEvent(message, self._require_tx("Message"), self._seq)
        self._seq += 1
        if self.count_tables:
            self._counts["<messages>"] += 1
        return [event]

    def _commit(self, commit: Commit) -> list[Output]:
        tx = self._require_tx("Commit")
        if self._begin is not None and self._begin.final_lsn != commit.commit_lsn:
            raise EventError(
                f"Commit at {commit.commit_lsn}",
                f"does not match Begin's final LSN {self._begin.final_lsn} (xid {tx.xid})",
            )
        end = TransactionEnd(tx, commit.end_lsn, self._seq, dict(self._counts))
        self._tx, self._begin, self._origin = None, None, None
        self.last_commit_lsn = commit.end_lsn
        return [end]

    # -- the native insert lane (bridge.sink.serializer.InsertLane) ---------------------------

    def next_position(self) -> tuple[TxContext, int] | None:
        """The transaction and ``seq`` the next change would get (``None`` outside one), for a
        caller that encodes an insert itself; nothing changes until :meth:`took_change`."""
        tx = self._tx
        return None if tx is None else (tx, self._seq)

    def took_change(self, table: RelationSchemas, count: int = 1) -> None:
        """``count`` changes of ``table`` from :meth:`next_position` on were produced by the
        caller: what :meth:`feed` would have counted for them."""
        self._seq += count
        if self.count_tables:
            self._counts[table.table] += count

    # -- helpers ------------------------------------------------------------------------------

    def _change(
        self,
        op: Op,
        table: RelationSchemas,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        toast: list[str] | tuple[str, ...],
    ) -> ChangeEvent:
        tx = self._require_tx(table.table)
        event = ChangeEvent(op, table, tx, self._seq, before, after, tuple(toast), self.message_lsn)
        self._seq += 1
        if self.count_tables:
            self._counts[table.table] += 1
        return event

    def _dead_letter(
        self,
        op: Op,
        table: RelationSchemas,
        before: TupleData | None,
        after: TupleData | None,
        error: ConversionError,
    ) -> DeadLetterEvent:
        """A change that cannot be converted: raised under ``fail``, else set aside whole (an
        update or a key change is one dead letter, never half of it)."""
        if self.failures.stops:
            raise error
        tx = self._require_tx(table.table)
        event = DeadLetterEvent(op, table, tx, self._seq, before, after, error)
        self._seq += 1
        if self.count_tables:
            self._counts[table.table] += 1
        return event

    def _require_tx(self, where: str) -> TxContext:
        if self._tx is None:
            raise EventError(where, "a change arrived outside Begin … Commit")
        return self._tx

    def _table(self, oid: int, what: str) -> RelationSchemas:
        table = self.relations.get(oid)
        if table is None:
            raise EventError(
                f"{what} in xid {self._tx.xid if self._tx else '?'}",
                f"relation OID {oid} was never described by a Relation message",
            )
        return table
