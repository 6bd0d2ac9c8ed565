"""Log line formats of the Python daemons (the tracker, ``storetorrent up``),
the same as st-peer's (st_core/src/log.cc; docs/operations.md, "Logs"):

* ``text``: ``2026-11-23 13:49:33.685 INFO st.tracker: message`` (local time,
  milliseconds);
* ``json``: one object per line, ``{"ts": "2026-11-23T12:49:33.685Z",
  "level": "INFO", "logger": "st.tracker", "msg": "message", ...}`` (UTC),
  plus the record's ``extra`` fields and ``exc`` (a traceback) if any.

Levels are named as st-peer names them: DEBUG, INFO, WARN, ERROR (and
CRITICAL).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timezone
from typing import TextIO

FORMATS = ("text", "json")

LEVEL_NAMES = {"WARNING": "WARN"}

# Attributes every LogRecord has; the others came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def level_name(record: logging.LogRecord) -> str:
    """The record's level as logged: ``WARN`` for WARNING (as st-peer writes it), others unchanged."""
    return LEVEL_NAMES.get(record.levelname, record.levelname)


def utc_timestamp(t: float) -> str:
    """RFC 3339 in UTC with milliseconds: ``2026-11-23T12:49:33.685Z``."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class TextFormatter(logging.Formatter):
    """``YYYY-MM-DD HH:MM:SS.mmm LEVEL logger: message``, local time. The
    message stays on one line, as st-peer's (line breaks become spaces, so
    text a client sent, such as a failure report's reason, cannot forge log
    lines); a traceback follows on the next lines."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one text line (local time), its traceback or stack on the next lines."""
        msg = record.getMessage().replace("\r", " ").replace("\n", " ")
        lt = time.localtime(record.created)
        line = (
            f"{time.strftime('%Y-%m-%d %H:%M:%S', lt)}.{int(record.msecs):03d} {level_name(record)} "
            f"{record.name}: {msg}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON object: ``ts`` (UTC, RFC 3339), ``level``,
        ``logger``, ``msg``, every ``extra=`` field, ``exc``/``stack`` if any."""
        out = {
            "ts": utc_timestamp(record.created),
            "level": level_name(record),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in _STANDARD and k not in out:
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def setup(level: str | int = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) in format ``fmt`` ("text" or "json"),
    replacing the root logger's handlers."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
