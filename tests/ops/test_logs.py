"""JSON and text log formatting and the logging setup."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from bridge.config import Secret
from bridge.errors import ConfigError
from bridge.ops.logs import JsonFormatter, configure_logging


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_configure_logging_json_writes_one_parsable_object_per_line(
    restore_root_logging: None,
) -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream)
    log = logging.getLogger("bridge.test")
    log.info("published %d records", 3, extra={"topic": "shop.public.orders", "lsn": "0/16B3748"})
    log.debug("not shown at INFO")
    log.warning("multi\nline")
    entries = _lines(stream)
    assert len(entries) == 2
    first = entries[0]
    assert first["level"] == "INFO" and first["logger"] == "bridge.test"
    assert first["msg"] == "published 3 records"
    assert first["topic"] == "shop.public.orders" and first["lsn"] == "0/16B3748"
    assert isinstance(first["ts"], str) and first["ts"].endswith("+00:00")
    assert entries[1]["msg"] == "multi\nline"


def test_configure_logging_keeps_per_call_library_lines_out(restore_root_logging: None) -> None:
    # The registry client's per-request and PySpark's gateway's per-command INFO lines would
    # bury the bridge's own (the demo printed py4j's for every Spark call); warnings stay.
    stream = io.StringIO()
    configure_logging("text", "info", stream)
    logging.getLogger("py4j.clientserver").info("Received command c on object id p0")
    logging.getLogger("httpx").info("HTTP Request: GET /apis/ccompat/v7/subjects")
    logging.getLogger("py4j.clientserver").warning("gateway connection lost")
    logging.getLogger("bridge.ops.demo").info("applied to Delta")
    text = stream.getvalue()
    assert "Received command" not in text and "HTTP Request" not in text
    assert "gateway connection lost" in text and "applied to Delta" in text


def test_json_formatter_includes_traceback_and_masks_secrets() -> None:
    logger = logging.getLogger("bridge.test")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logger.makeRecord(
            "bridge.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    record.__dict__["password"] = Secret("hunter2")
    record.__dict__["obj"] = object()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert "RuntimeError: boom" in entry["exc"]
    assert entry["password"] == "***"
    assert "hunter2" not in line
    assert entry["obj"].startswith("<object object")


def test_json_formatter_does_not_let_extras_overwrite_fixed_fields() -> None:
    record = logging.makeLogRecord({"name": "x", "levelname": "INFO", "msg": "m", "level": "fake"})
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "INFO"
    assert entry["extra_level"] == "fake"


def test_configure_logging_replaces_its_own_handler_only(restore_root_logging: None) -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    first = configure_logging("text", "DEBUG", io.StringIO())
    stream = io.StringIO()
    second = configure_logging("text", "WARNING", stream)
    assert first not in root.handlers and second in root.handlers and foreign in root.handlers
    assert root.level == logging.WARNING
    logging.getLogger("bridge.test").warning("hello %s", "world")
    assert stream.getvalue().rstrip().endswith("WARNING bridge.test: hello world")


@pytest.mark.parametrize(
    ("fmt", "level", "key"), [("xml", "INFO", "log.format"), ("json", "LOUD", "log.level")]
)
def test_configure_logging_rejects_bad_format_or_level(fmt: str, level: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        configure_logging(fmt, level, io.StringIO())
    assert raised.value.key == key
