"""Structured logging (structlog): JSON lines in production, readable console lines in development."""
from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from core.settings import Settings


def configure_logging(settings: Settings) -> None:
    """Route structlog and the standard library's logging (Celery, uvicorn, boto) through one renderer."""
    level = logging.getLevelName(settings.log_level)
    renderer: Any = (
        structlog.processors.JSONRenderer() if settings.json_logs else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def get_logger(**bound: Any) -> Any:
    """A logger with `bound` fields on every line (lines about a job carry `job_id`, and `doc_id` if any). It is
    resolved at each call, so one taken at import time, before configure_logging, logs as configured."""
    return structlog.get_logger("docflash", **bound)
