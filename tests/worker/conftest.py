"""Worker-side fixtures: the test-only `sleep` task in this process, and a JobService whose queue no worker
consumes (tests drive JobProcessor directly)."""
from __future__ import annotations

import importlib
import uuid
from pathlib import Path

import pytest

from core.service import JobService
from core.storage import S3Storage
from worker.processing import JobProcessor

SUPPORT_DIR = Path(__file__).parent / "support"


@pytest.fixture(scope="session")
def test_tasks():
    """The test task module (registers `sleep`), importable as the worker subprocesses import it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SUPPORT_DIR))
        yield importlib.import_module("docflash_test_tasks")


@pytest.fixture
def offline_service(service_settings) -> JobService:
    """A JobService on a queue of its own (nothing consumes it) and its own Redis key prefix."""
    settings = service_settings.model_copy(
        update={"gpu_queue": f"offline-{uuid.uuid4().hex[:8]}", "redis_prefix": f"offline-{uuid.uuid4().hex[:8]}:",
                "pack_token_budget": 64}
    )
    return JobService.from_settings(settings)


@pytest.fixture
def processor(offline_service: JobService) -> JobProcessor:
    """A JobProcessor on the same Redis state and S3 as `offline_service`."""
    return JobProcessor(offline_service.settings, offline_service.state, S3Storage(offline_service.settings))
