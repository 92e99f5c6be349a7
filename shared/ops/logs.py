"""One log format for every process (web, worker, beat, embedded): text or JSON.

Standard `logging` only: `logging_config` is a `dictConfig` dictionary (gunicorn
takes it as `logconfig_dict`), `configure_logging` applies it. Every record
passes the correlation filter, so each line names the request id and task id
bound at the time (`shared.ops.correlation`). `TOOLNEXUS_LOG_FORMAT=json` writes one
JSON object per line; fields given with `fields(...)` become its keys.

`TOOLNEXUS_LOG_LEVEL` sets the level of the service's own loggers; the root
logger (Celery's, gunicorn's and every library's lines) gets `root_level`
when given (Celery's `-l`), else the same level.
"""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any, Final

from shared.ops import correlation
from shared.settings import Settings

# The service's own top-level packages, whose level TOOLNEXUS_LOG_LEVEL sets.
OWN_LOGGERS: Final = ("shared", "web", "worker", "toolnexus")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_FIELDS: Final = "toolnexus_fields"


def fields(**values: object) -> dict[str, Any]:
    """`extra=` for a log call whose values should be JSON keys of their own
    (None values are left out)."""
    return {_FIELDS: {key: value for key, value in values.items() if value is not None}}


class CorrelationFilter(logging.Filter):
    """Stamps each record with the request id and task id bound when it was made."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = correlation.request_id()
        if getattr(record, "task_id", None) is None:
            record.task_id = correlation.task_id()
        return True


class TextFormatter(logging.Formatter):
    """The classic line, with ` request_id=… task_id=…` added when bound."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{name}={value}"
            for name in ("request_id", "task_id")
            if (value := getattr(record, name, None)) and f"{value}" not in record.getMessage()
        ]
        if not ids:
            return line
        head, newline, trace = line.partition("\n")
        return f"{head} {' '.join(ids)}{newline}{trace}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (tracebacks included, escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for name in ("request_id", "task_id"):
            if value := getattr(record, name, None):
                entry[name] = value
        entry.update(getattr(record, _FIELDS, None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def formatter(kind: str = "text") -> logging.Formatter:
    """The formatter for TOOLNEXUS_LOG_FORMAT (a `dictConfig` factory)."""
    return JsonFormatter() if kind == "json" else TextFormatter()


def logging_config(settings: Settings, *, root_level: str | int | None = None) -> dict[str, Any]:
    """A `dictConfig` dictionary: everything to stderr in one format."""
    level = settings.log_level
    root = logging.getLevelName(root_level) if isinstance(root_level, int) else root_level
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"correlation": {"()": CorrelationFilter}},
        "formatters": {"toolnexus": {"()": formatter, "kind": settings.log_format}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "toolnexus",
                "filters": ["correlation"],
            }
        },
        "root": {"level": root or level, "handlers": ["stderr"]},
        "loggers": {name: {"level": level} for name in OWN_LOGGERS},
    }


def configure_logging(settings: Settings, *, root_level: str | int | None = None) -> None:
    logging.config.dictConfig(logging_config(settings, root_level=root_level))
