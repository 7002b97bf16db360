"""Initial snapshots: the rows a table already has, as ``r`` events, then streaming from exactly
where the copy stands.

A second source, not a mode of the replication loop: it feeds the same stages as streaming
(the :class:`~bridge.events.EventBuilder`'s schemas, the registrar, the serializer, the publisher
built by :func:`bridge.runner.build_parts`), so a copied row and a streamed row of the same table
version go to the same topic, under the same key and schema, byte for byte.

When (``snapshot.mode``, Debezium's names)
    ``initial`` (default): when the slot does not exist yet; ``initial_only``: the same, then
    stop without streaming; ``no_data``: never; ``when_needed``: also when the slot was
    invalidated (it is dropped and created again); ``always``: at every start. In every mode a
    snapshot recorded as under way for the slot is resumed. ``snapshot.include.collection.list``
    narrows the captured tables that are copied. :func:`bridge.snapshot.run.decide` is the rule.

The hand-over: an exported snapshot, streaming afterwards
    The publication is ensured first, then the slot is created with an exported snapshot
    (:class:`~bridge.source.snapshot_slot.SlotWithSnapshot`), whose connection stays open while
    the workers import it. Every row is read as of the slot's *consistent point*: the rows of
    every transaction committed before it, none of those after. Streaming starts only after
    every table's rows were delivered and acknowledged, from the slot's confirmed position,
    which is still the consistent point (nothing acknowledges the slot during a snapshot): it
    delivers exactly the transactions committed after the copy's view. So, per key, every ``r``
    record precedes every streamed change in Kafka, nothing is missed and nothing doubled. The
    price: the server retains the WAL written during the snapshot (the slot's restart point
    stays at the consistent point), and streaming of all tables waits until the snapshot ends.

Positions
    ``r`` events carry ``source.commit_lsn`` = the consistent point (below every streamed
    change's commit LSN) and ``seq`` = ``run << 52 | chunk << 32 | row``
    (:func:`bridge.snapshot.plan.position`): unique per table, deterministic within an attempt,
    and different between attempts, so replaying a topic by ``(commit_lsn, seq)`` applies all
    snapshot rows before every change, and a consumer deduplicating by position never confuses
    a row copied after a restart with another one delivered before. ``source.snapshot`` is
    ``first`` on the first row of the snapshot, ``last`` on its very last, ``true`` otherwise.

Parallel, chunked (:mod:`bridge.snapshot.plan`, :mod:`bridge.snapshot.reader`)
    Up to ``snapshot.max.threads`` workers, each its own connection in the same snapshot, copy
    chunks of ``snapshot.chunk.size`` rows: key ranges of the primary key (or a unique index on
    NOT NULL columns), block (CTID) ranges for a table without one, the whole table for tables
    without a message key (see below). Each chunk is ``COPY (SELECT <published columns> …) TO
    STDOUT (FORMAT binary)``: values in the types' send format, which is pgoutput's binary
    format, parsed by :mod:`bridge.snapshot.copy_binary` into TupleData and encoded by the
    table's RowEncoder (and its C accelerator; columns it reads only in text form are selected
    as ``col::text``, whose binary form is the output text pgoutput sends in text mode, see
    :func:`bridge.snapshot.plan.wire_kinds`). Workers lock every table ``ACCESS SHARE`` at
    the start, as pg_dump does: TRUNCATE and DDL on a table wait for the end of the snapshot
    (inserts, updates and deletes do not), because a table rewritten after a snapshot was taken
    looks empty to it. Where the table's columns are the C accelerator's, a worker turns each
    COPY row into its finished Kafka record in one C call
    (:class:`~bridge.sink.serializer.CopyLane`, byte for byte the serializer's record of the
    event the slow path builds), packed with the rest of its batch into one buffer that goes
    to librdkafka as it is (``bridge/native/packed.h``: no Python object per record); other
    rows go through the parser, the converters and the serializer. Workers are threads: the
    server's work overlaps, but what is left per row in Python (the COPY read, the hand-over,
    the producer's batch and delivery report) shares one interpreter, which bounds the rate
    (``bench/snapshot_bench.py``).
    ``snapshot.select.statement.overrides`` (Debezium's keys) replaces a table by the user's
    query as the source of its rows; key ranges and the publication's row filter still apply
    to it (:func:`bridge.snapshot.plan.select_statement`), and it is tried once, returning no
    rows, before anything is copied.

Watching it
    On a terminal, bars redrawn in place (:mod:`bridge.snapshot.terminal`); elsewhere a log
    line per table every ``snapshot.progress.interval.ms`` (rows, MB, chunks, rate, time
    left against ``pg_class.reltuples``; :mod:`bridge.snapshot.progress`), ``pgbridge status``
    (from the state file), and ``pgbridge_snapshot_*`` metrics (:mod:`bridge.snapshot.metrics`).

Durable progress and resume (:mod:`bridge.snapshot.state`)
    After all records of a chunk are acknowledged by Kafka, the chunk is recorded in the state
    file (``snapshot.state.file``, default ``<state.dir>/snapshot-<slot>.json``, replaced
    atomically). After a crash (kill -9) the exported snapshot is gone with its connection; the
    next start finds the state "copying" for the slot, whose confirmed position is still the
    consistent point P, and copies the remaining chunks in a NEW snapshot taken at the restart
    (time T > P), positioned at P like the rest; streaming then starts from P as usual.

    For a table with a message key this is still exact for a consumer that applies records by
    key in ``(commit_lsn, seq)`` order. A key's ``r`` row read at T reflects every change
    committed up to T; the stream then replays every change committed after P, including those
    between P and T, each with the key's full new row or its deletion: an insert becomes an
    upsert of the same row, an update an upsert, a delete removes the row whether or not the
    copy had it, a truncate clears the table and the inserts after it come back, an update that
    changes the key is a delete of the old key and a create of the new one. A key no change
    touched after P has the same row at T as at P. So after the stream caught up, every key
    holds its latest state: the source's. (Block ranges are exact too: a row that moved between
    ranges was updated, so the stream carries it; a table rewritten since P, whose blocks were
    renumbered, is copied whole again.)

    A table without a message key is a multiset downstream: there is no key to overwrite, so
    replaying the changes made between P and T over rows read at T would apply them twice. Such
    a table is therefore copied as one chunk, and such tables are copied first, which is exact
    in an uninterrupted snapshot and makes them the least likely to be cut by a crash. If one
    is not completely copied when a crash comes, the restart copies it whole in the new
    snapshot and logs a warning naming it: changes made to it between P and the restart may be
    applied to rows that already contain them, and rows delivered before the crash may arrive
    twice. (An exact rule would need the table re-read at a known LSN and its stream changes up
    to that LSN skipped, per table, in the streaming pipeline: the DBLog / per-table catch-up
    design.) The state file is written as soon as the slot exists, before anything is planned,
    so a crash at any moment after the slot's creation leads to a resumed snapshot, never to a
    slot that streams without one.

Faults
    A table dropped, altered or rewritten under the snapshot, a permission denied, a statement
    or lock timeout, a snapshot that cannot be imported: typed errors naming the table and chunk
    (:mod:`bridge.snapshot.errors`). A failing chunk is never recorded; nothing is confirmed to
    the slot during a snapshot, so a restart resumes it.
"""

from bridge.snapshot.errors import (
    SnapshotError,
    SnapshotImportError,
    SnapshotPermissionError,
    SnapshotStateMismatchError,
    SnapshotTableChangedError,
    SnapshotTableError,
    SnapshotTimeoutError,
)

__all__ = [
    "SnapshotError",
    "SnapshotImportError",
    "SnapshotPermissionError",
    "SnapshotStateMismatchError",
    "SnapshotTableChangedError",
    "SnapshotTableError",
    "SnapshotTimeoutError",
]
