"""Logging: JSON lines carry the bound job and document ids; stdlib loggers go through the same renderer."""
from __future__ import annotations

import json
import logging

import pytest
import structlog

from core.logging import configure_logging, get_logger
from core.settings import Settings


@pytest.fixture(autouse=True)
def _restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_json_lines_carry_job_and_document_ids(capsys: pytest.CaptureFixture) -> None:
    configure_logging(Settings(_env_file=None, log_json=True, log_level="INFO"))
    get_logger(job_id="j-1").bind(doc_id="d-7").info("document succeeded", elapsed_s=0.25)
    logging.getLogger("celery.worker").warning("from the standard library")
    get_logger(job_id="j-1").debug("below the level")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines[0]["event"] == "document succeeded"
    assert (lines[0]["job_id"], lines[0]["doc_id"], lines[0]["level"]) == ("j-1", "d-7", "info")
    assert lines[1]["event"] == "from the standard library" and lines[1]["logger"] == "celery.worker"
    assert len(lines) == 2


def test_a_logger_taken_before_configuration_logs_as_configured(capsys: pytest.CaptureFixture) -> None:
    structlog.reset_defaults()  # as in a fresh process
    early = get_logger(job_id="j-3")  # as a module-level logger, made at import time
    configure_logging(Settings(_env_file=None, log_json=True, log_level="INFO"))
    early.warning("after configuration")
    [line] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (line["event"], line["job_id"], line["level"]) == ("after configuration", "j-3", "warning")


def test_console_lines_in_development(capsys: pytest.CaptureFixture) -> None:
    configure_logging(Settings(_env_file=None, env="development", log_level="DEBUG"))
    get_logger(job_id="j-2").debug("hello")
    err = capsys.readouterr().err
    assert "hello" in err and "job_id=j-2" in err and not err.lstrip().startswith("{")
