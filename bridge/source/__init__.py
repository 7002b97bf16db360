"""I/O toward PostgreSQL: the logical replication stream, its slot and publication.

:class:`LogicalReplicationSource` implements :class:`ChangeSource` (see :mod:`bridge.source.api`
for the contract with the pipeline); :class:`SourceConfig` configures it.
:class:`SlotWithSnapshot` creates a slot with an exported snapshot for the initial copy.
"""

from bridge.source.api import ChangeSource
from bridge.source.assembler import AssemblerStats, StreamAssembler
from bridge.source.config import PublicationConfig, PublicationMode, ReconnectPolicy, SourceConfig
from bridge.source.errors import (
    FailoverSlotUnsupportedError,
    PublicationMismatchError,
    PublicationMissingError,
    ReplicationConnectionLost,
    ReplicationPrivilegeError,
    ServerInRecoveryError,
    ServerVersionError,
    SlotInUseError,
    SlotInvalidatedError,
    SlotMismatchError,
    SlotMissingError,
    SourceError,
    StreamProtocolError,
    TwoPhaseNotSupportedError,
    WalLevelError,
)
from bridge.source.protocol import StreamOptions, negotiate
from bridge.source.replication import LogicalReplicationSource, SourceStats
from bridge.source.snapshot_slot import ExportedSnapshot, SlotWithSnapshot

__all__ = [
    "AssemblerStats",
    "ChangeSource",
    "ExportedSnapshot",
    "FailoverSlotUnsupportedError",
    "LogicalReplicationSource",
    "PublicationConfig",
    "PublicationMismatchError",
    "PublicationMissingError",
    "PublicationMode",
    "ReconnectPolicy",
    "ReplicationConnectionLost",
    "ReplicationPrivilegeError",
    "ServerInRecoveryError",
    "ServerVersionError",
    "SlotInUseError",
    "SlotInvalidatedError",
    "SlotMismatchError",
    "SlotMissingError",
    "SlotWithSnapshot",
    "SourceConfig",
    "SourceError",
    "SourceStats",
    "StreamAssembler",
    "StreamOptions",
    "StreamProtocolError",
    "TwoPhaseNotSupportedError",
    "WalLevelError",
    "negotiate",
]
