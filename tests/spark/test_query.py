"""bridge.spark.query: the session settings a query's checkpoint gets."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("location", "local"),
    [
        ("/var/lib/pgbridge/checkpoint", True),
        ("file:///var/lib/pgbridge/checkpoint", True),
        ("relative/checkpoint", True),
        ("hdfs://nn:8020/pgbridge/checkpoint", False),
        ("s3a://lake/_chk/apply", False),
    ],
)
def test_a_local_checkpoint_is_written_through_the_file_system_manager(
    location: str, local: bool
) -> None:
    """Local checkpoints avoid FileContext's renames (Hadoop forks readlink for each without
    its native library); other file systems keep Spark's choice."""
    from bridge.spark.query import FILE_SYSTEM_CHECKPOINTS, checkpoint_conf

    wanted = {"spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_CHECKPOINTS}
    assert checkpoint_conf(location) == (wanted if local else {})
