"""Logging setup: human-readable text or one JSON object per line.

JSON lines are what log shippers (Fluent Bit, Vector, Loki, CloudWatch) parse without a
custom pattern. Each line has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``
and ``msg``, then every ``extra={...}`` field the call site passed (``table``, ``lsn``,
``topic``, …), then ``exc`` with the formatted traceback when there is one. Values that are
not JSON types are rendered with ``str()``, which keeps :class:`bridge.config.Secret` masked.

:func:`configure_logging` is called once by the CLI; calling it again replaces the handler it
installed instead of stacking another one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

from bridge.errors import ConfigError

__all__ = ["TEXT_FORMAT", "JsonFormatter", "configure_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
) | {"message", "asctime", "taskName"}
_FIXED = ("ts", "level", "logger", "msg")


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (see the module docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name in _STANDARD_ATTRS:
                continue
            # An extra named like a fixed field must not overwrite it.
            entry[f"extra_{name}" if name in _FIXED else name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


_HANDLER_MARK = "_pgbridge_handler"


#: Libraries whose INFO lines are per request or per call: logged from WARNING up only.
CHATTY_LIBRARIES: tuple[str, ...] = ("httpx", "py4j")


def configure_logging(format: str, level: str, stream: TextIO | None = None) -> logging.Handler:
    """Log to ``stream`` (stderr) as ``format`` (``text`` or ``json``) at ``level``.

    Replaces a handler installed by an earlier call; other handlers are left alone.
    """
    if format not in ("text", "json"):
        raise ConfigError("log.format", f"must be 'text' or 'json', got {format!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigError("log.level", f"unknown log level {level!r}")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARK, False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT))
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(numeric)
    # The registry client logs every HTTP request at INFO, and py4j (PySpark's gateway) every
    # command it passes to the JVM: noise unless debugging.
    for chatty in CHATTY_LIBRARIES:
        logging.getLogger(chatty).setLevel(max(numeric, logging.WARNING))
    return handler
