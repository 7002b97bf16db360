"""The running stack's record (``<stack dir>/stack.json``): read back by any pgbridge version,
so that one can still find, stop and restart a stack another version started."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.devstack.stack import LocalStack, StackInfo


def test_a_record_with_keys_of_another_version_is_read_without_them(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    info = StackInfo(
        stack_dir=str(tmp_path),
        postgres_major="17",
        postgres_port=5999,
        bootstrap_servers="127.0.0.1:9999",
        registry_url="http://127.0.0.1:8999/apis/ccompat/v7",
        spark_jars=("/jars/a.jar",),
        brokers=3,
    )
    stack._write_info(info)
    record = tmp_path / "stack.json"
    data = json.loads(record.read_text())
    data["spark_class_archive"] = "/cache/x.jsa"  # written by a version that had this field
    record.write_text(json.dumps(data))

    assert stack._read_info() == info
    again = LocalStack(tmp_path)  # what `pgbridge dev down` builds first
    assert again.postgres_major == "17" and again.brokers == 3
