"""Typed errors of the replication source.

Each class names one condition a user can act on and carries its context as attributes
(``slot``, ``publication``, ``sqlstate``, server facts), so callers and logs need not parse
message text. :class:`SourceError` is the common base; :class:`ReplicationConnectionLost` is the
only one the source retries by itself (see :mod:`bridge.source.replication`).
"""

from __future__ import annotations

from bridge.errors import PgBridgeError


class SourceError(PgBridgeError):
    """Base of every error of the replication source; ``sqlstate`` when the server sent one."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class ServerVersionError(SourceError):
    """The server is older than the oldest version pgbridge supports (PostgreSQL 13)."""

    def __init__(self, server_version_num: int, minimum: int) -> None:
        super().__init__(
            f"PostgreSQL server_version_num {server_version_num} is too old: "
            f"logical replication with pgoutput needs at least {minimum}"
        )
        self.server_version_num = server_version_num
        self.minimum = minimum


class WalLevelError(SourceError):
    """``wal_level`` is not ``logical``; the server must be reconfigured and restarted."""

    def __init__(self, wal_level: str) -> None:
        super().__init__(
            f"wal_level is {wal_level!r}, logical decoding needs 'logical' "
            "(set wal_level = logical in postgresql.conf and restart the server)",
            sqlstate="55000",
        )
        self.wal_level = wal_level


class ReplicationPrivilegeError(SourceError):
    """The role may not open a replication connection (needs REPLICATION or superuser)."""

    def __init__(self, user: str | None, detail: str, sqlstate: str | None = "42501") -> None:
        who = f"role {user!r}" if user else "the connecting role"
        super().__init__(
            f"{who} lacks the REPLICATION privilege (ALTER ROLE ... REPLICATION): {detail}",
            sqlstate=sqlstate,
        )
        self.user = user


class SlotInUseError(SourceError):
    """Another process streams from the slot (SQLSTATE 55006, ``object_in_use``)."""

    def __init__(self, slot: str, active_pid: int | None, detail: str = "") -> None:
        pid = f" by PID {active_pid}" if active_pid is not None else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"replication slot {slot!r} is in use{pid}{extra}", sqlstate="55006")
        self.slot = slot
        self.active_pid = active_pid


class SlotInvalidatedError(SourceError):
    """The slot can no longer stream: the WAL it needs was removed (or it was invalidated)."""

    def __init__(self, slot: str, reason: str, sqlstate: str | None = None) -> None:
        super().__init__(
            f"replication slot {slot!r} was invalidated ({reason}); it must be dropped and "
            "recreated, and the tables snapshotted again",
            sqlstate=sqlstate,
        )
        self.slot = slot
        self.reason = reason


class SlotMissingError(SourceError):
    """The slot does not exist and creating it was not allowed."""

    def __init__(self, slot: str) -> None:
        super().__init__(f"replication slot {slot!r} does not exist", sqlstate="42704")
        self.slot = slot


class SlotMismatchError(SourceError):
    """An existing slot cannot serve this source (other plugin, database, two-phase, …)."""

    def __init__(self, slot: str, attribute: str, expected: str, actual: str) -> None:
        super().__init__(
            f"replication slot {slot!r} has {attribute} = {actual!r}, expected {expected!r}"
        )
        self.slot = slot
        self.attribute = attribute
        self.expected = expected
        self.actual = actual


class PublicationMissingError(SourceError):
    """The publication does not exist and creating it was not allowed (or it was dropped)."""

    def __init__(self, publication: str, sqlstate: str | None = "42704") -> None:
        super().__init__(f"publication {publication!r} does not exist", sqlstate=sqlstate)
        self.publication = publication


class PublicationMismatchError(SourceError):
    """An existing publication does not publish what the configuration asks for."""

    def __init__(self, publication: str, detail: str) -> None:
        super().__init__(f"publication {publication!r}: {detail}")
        self.publication = publication
        self.detail = detail


class StreamProtocolError(SourceError):
    """The server's messages arrived in an order the protocol does not allow.

    ``message`` names the offending message, ``xid`` the transaction concerned (if any).
    """

    def __init__(self, message: str, detail: str, xid: int | None = None) -> None:
        where = f" (xid {xid})" if xid is not None else ""
        super().__init__(f"unexpected {message}{where}: {detail}")
        self.message = message
        self.xid = xid


class TwoPhaseNotSupportedError(StreamProtocolError):
    """A two-phase (prepared transaction) message arrived; pgbridge never enables two_phase.

    This happens only with a slot created with ``two_phase`` by another tool; use a slot
    created by pgbridge.
    """

    def __init__(self, message: str, xid: int | None) -> None:
        super().__init__(
            message, "two-phase decoding is not enabled by pgbridge; is the slot two_phase?", xid
        )


class ReplicationConnectionLost(SourceError):
    """The replication connection broke (network, server restart, walsender terminated).

    Retried with backoff by the source; raised to the caller only when retries are exhausted.
    """

    def __init__(self, detail: str, sqlstate: str | None = None, attempts: int = 0) -> None:
        tail = f" after {attempts} reconnect attempts" if attempts else ""
        super().__init__(f"replication connection lost{tail}: {detail}", sqlstate=sqlstate)
        self.detail = detail
        self.attempts = attempts


class ServerInRecoveryError(ReplicationConnectionLost):
    """The server reached is a standby (``pg_is_in_recovery()``): no slot may be created or
    streamed there. Retried like a lost connection, since a standby becomes a primary when it
    is promoted, and a multi-host DSN may reach the primary on the next attempt."""

    def __init__(self, where: str) -> None:
        detail = (
            f"{where} is a standby (in recovery); waiting for a primary: promote the standby, "
            "or list the primary in database.dsn with target_session_attrs=read-write"
        )
        # read_only_sql_transaction: the closest standard code.
        SourceError.__init__(self, detail, sqlstate="25006")
        self.detail = detail
        self.attempts = 0
        self.where = where


class FailoverSlotUnsupportedError(SourceError):
    """``slot.failover`` asks for a failover slot, which PostgreSQL supports from 17."""

    def __init__(self, server_version_num: int) -> None:
        super().__init__(
            f"slot.failover = true needs PostgreSQL 17 or later (failover slots are synchronised "
            f"to standbys from 17); the server is {server_version_num}: set slot.failover = false"
        )
        self.server_version_num = server_version_num


class SpillError(SourceError):
    """The spill directory could not take or give back a streamed transaction (disk full, quota,
    directory gone, read-only, not permitted): ``directory``, ``xid``, ``errno`` say which.
    Transient for the bridge: nothing of the transaction was published, so it streams again
    from the slot's confirmed position once the directory works (:mod:`bridge.restarts`)."""

    def __init__(self, directory: str, xid: int, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        super().__init__(
            f"spill directory {directory}: {reason} (streamed transaction xid {xid}; set "
            "streaming.spill.dir or streaming.spill.threshold.bytes)"
        )
        self.directory = directory
        self.xid = xid
        self.errno = exc.errno


class DatabaseAccessError(SourceError):
    """PostgreSQL refused the connection for a reason another attempt will not change:
    authentication, ``pg_hba.conf``, or TLS (the server's certificate, a required
    encryption); the message is libpq's and the hint names the setting to look at."""

    def __init__(self, message: str, hint: str, sqlstate: str | None = None) -> None:
        super().__init__(
            f"PostgreSQL refused the connection: {message} ({hint})", sqlstate=sqlstate
        )
        self.hint = hint


#: Refusals by what libpq or the server says, most specific first, with what to check.
_REFUSALS: tuple[tuple[str, str], ...] = (
    ("password authentication failed", "check database.password or database.password.file"),
    ("no password supplied", "set database.password or database.password.file"),
    ("certificate verify failed", "the server's certificate is not signed by a CA in "
     "database.sslrootcert"),
    ("does not match host name", "the server's certificate is not for database.hostname"),
    ("root certificate file", "database.sslmode verify-ca/verify-full needs "
     "database.sslrootcert"),
    ("server does not support ssl", "the server has no TLS: lower database.sslmode"),
    ("no encryption", "the server accepts only TLS connections: set database.sslmode to "
     "require, verify-ca or verify-full"),
    ("pg_hba.conf", "the server's pg_hba.conf has no entry for this user, database and host"),
    ("authentication failed", "check the user's credentials"),
    ("ssl error", "the TLS handshake failed: check database.sslmode, database.sslrootcert "
     "and the client certificate"),
)  # fmt: skip


def access_refusal(message: str, sqlstate: str | None = None) -> DatabaseAccessError | None:
    """The typed error when ``message`` says the server refused us for good, else ``None``."""
    lowered = message.lower()
    first = message.strip().splitlines()[0] if message.strip() else message
    for needle, hint in _REFUSALS:
        if needle in lowered:
            return DatabaseAccessError(first, hint, sqlstate)
    return None


def classify_server_error(
    slot: str,
    publication: str,
    sqlstate: str | None,
    message: str,
    detail: str = "",
    user: str | None = None,
) -> SourceError:
    """The typed error for an error the server (or libpq) reported on the replication path.

    :class:`ReplicationConnectionLost` (and :class:`SlotInUseError`) are the retryable ones.
    """
    text = f"{message} {detail}".strip()
    lowered = text.lower()
    if sqlstate == "55006":
        return SlotInUseError(slot, _active_pid(text), message)
    if sqlstate == "42501" or "replication role" in lowered or "replication privilege" in lowered:
        return ReplicationPrivilegeError(user, message, sqlstate)
    if sqlstate == "42704" and "publication" in lowered:
        return PublicationMissingError(publication, sqlstate)
    if sqlstate == "42704" and "replication slot" in lowered:
        return SlotMissingError(slot)
    if "wal_level" in lowered:
        return WalLevelError("(not logical)")
    if sqlstate == "55000" and ("invalidated" in lowered or "can no longer get changes" in lowered):
        return SlotInvalidatedError(slot, text, sqlstate)
    refusal = access_refusal(text, sqlstate)
    if refusal is not None:
        return refusal  # not worth another attempt: a setting must change
    if sqlstate is None or sqlstate.startswith(("08", "57")):
        # Connection exceptions (08xxx) and operator intervention (57xxx: admin shutdown,
        # pg_terminate_backend, crash recovery, cannot connect now) are worth another attempt.
        return ReplicationConnectionLost(text or "connection closed", sqlstate)
    return SourceError(f"replication failed: {text}", sqlstate=sqlstate)


def _active_pid(text: str) -> int | None:
    # "replication slot "s" is active for PID 1234"
    tail = text.rpartition("PID ")[2].split()
    return int(tail[0]) if tail and tail[0].isdigit() else None
