"""Configuration of the replication source, as validated frozen dataclasses."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from bridge.errors import ConfigError
from bridge.pgoutput.lsn import Lsn

__all__ = ["PublicationConfig", "PublicationMode", "ReconnectPolicy", "SourceConfig"]

# Slot names: lower-case letters, digits and underscores, as PostgreSQL requires.
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")


class PublicationMode(StrEnum):
    """Who decides what the publication contains."""

    ALL_TABLES = "all_tables"  # CREATE PUBLICATION … FOR ALL TABLES (needs superuser)
    FILTERED = "filtered"  # an explicit table list computed from include/exclude patterns
    USER = "user"  # the user manages it; pgbridge only checks that it exists


@dataclass(frozen=True, slots=True)
class PublicationConfig:
    """The publication to stream and how to manage it.

    In ``FILTERED`` mode the table list is every ordinary or partitioned table in
    ``include_schemas`` plus ``include_tables`` (``schema.table``), minus ``exclude_tables``;
    with neither include list given, every table outside the system schemas. The list is
    reconciled at every start, and every ``publication.refresh.interval.ms`` while streaming
    (:mod:`bridge.source.table_watch`), so tables created later are published without a
    restart.
    """

    name: str
    mode: PublicationMode = PublicationMode.ALL_TABLES
    include_schemas: tuple[str, ...] = ()
    include_tables: tuple[str, ...] = ()
    exclude_tables: tuple[str, ...] = ()
    create: bool = True  # create it when missing (ALL_TABLES and FILTERED)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("publication.name", "must not be empty")
        for key, tables in (
            ("publication.include_tables", self.include_tables),
            ("publication.exclude_tables", self.exclude_tables),
        ):
            for table in tables:
                if table.count(".") != 1 or "" in table.split("."):
                    raise ConfigError(key, f"{table!r} is not schema.table")
        if self.mode is not PublicationMode.FILTERED and (
            self.include_schemas or self.include_tables or self.exclude_tables
        ):
            raise ConfigError("publication.mode", "include/exclude lists need mode 'filtered'")


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """Exponential backoff after the replication connection breaks.

    Waits ``initial_delay``, doubling up to ``max_delay``; gives up after ``max_attempts``
    consecutive failures (``None``: never). A slot still held by the previous, dying walsender
    is retried for ``slot_in_use_timeout`` seconds before :class:`SlotInUseError` is raised.
    """

    initial_delay: float = 0.5
    max_delay: float = 30.0
    max_attempts: int | None = None
    slot_in_use_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_delay <= self.max_delay:
            raise ConfigError("reconnect.initial_delay", "must be > 0 and <= max_delay")
        if self.max_attempts is not None and self.max_attempts < 0:
            raise ConfigError("reconnect.max_attempts", "must not be negative")

    def delay(self, attempt: int) -> float:
        """The wait before reconnect attempt ``attempt`` (1-based)."""
        return float(min(self.max_delay, self.initial_delay * 2 ** max(0, attempt - 1)))


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Everything the replication source needs.

    ``dsn`` is a libpq connection string for the database to stream (``replication=database``
    is added for the replication connection). ``status_interval`` is how often a standby status
    update is sent even when nothing changed (the server's ``wal_sender_timeout`` must be larger;
    default 60 s). ``idle_interval`` bounds how long the message iterator blocks before yielding
    ``None`` so the caller can poll its producer. ``spill_threshold`` is the memory (bytes of
    buffered pgoutput payloads) streamed transactions may use before spilling to ``spill_dir``.
    ``heartbeat_query`` (Debezium's ``heartbeat.action.query``) runs every
    ``heartbeat_interval`` seconds on a separate ordinary connection, e.g. to write into a
    published heartbeat table so the slot advances on databases with little traffic.
    ``server_options`` are extra GUCs for the walsender session (``-c key=value``), for example
    ``logical_decoding_work_mem``. ``failover`` (PostgreSQL 17+) creates the slot as a failover
    slot, or turns that on for an existing one, so that a standby with
    ``sync_replication_slots = on`` keeps a copy to resume from after its promotion.
    """

    dsn: str
    slot_name: str
    publication: PublicationConfig
    create_slot: bool = True
    failover: bool = False
    binary: bool = False
    streaming: bool = True
    status_interval: float = 10.0
    idle_interval: float = 1.0
    spill_threshold: int = 64 * 1024 * 1024
    spill_dir: Path | None = None
    heartbeat_query: str | None = None
    heartbeat_interval: float = 60.0
    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    server_options: tuple[tuple[str, str], ...] = ()
    application_name: str = "pgbridge"
    #: A position another connector already delivered (a Debezium takeover,
    #: bridge.source.takeover): streaming starts at the later of it and the slot's.
    start_after: Lsn | None = None

    def __post_init__(self) -> None:
        if not self.dsn:
            raise ConfigError("source.dsn", "must not be empty")
        if not _SLOT_NAME.match(self.slot_name):
            raise ConfigError(
                "source.slot_name",
                f"{self.slot_name!r}: use 1-63 lower-case letters, digits and underscores",
            )
        if self.status_interval <= 0:
            raise ConfigError("source.status_interval", "must be positive")
        if self.idle_interval <= 0:
            raise ConfigError("source.idle_interval", "must be positive")
        if self.spill_threshold < 0:
            raise ConfigError("source.spill_threshold", "must not be negative")
        if self.heartbeat_query is not None and self.heartbeat_interval <= 0:
            raise ConfigError("source.heartbeat_interval", "must be positive")
        for key, _ in self.server_options:
            if not re.match(r"^[a-z_][a-z0-9_.]*$", key):
                raise ConfigError("source.server_options", f"{key!r} is not a setting name")
