"""Worker-side fixtures: the test-only `sleep` task in this process and a tiny random-weight Llama as the LLM of
the LLM tasks."""
from __future__ import annotations

import importlib
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
def processor(offline_service: JobService) -> JobProcessor:
    """A JobProcessor on the same Redis state and S3 as `offline_service`."""
    return JobProcessor(offline_service.settings, offline_service.state, S3Storage(offline_service.settings))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """Folder of a tiny random-weight Llama checkpoint (MiniLM tokenizer), saved once per session."""
    from worker.llm.random_checkpoint import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def llm_settings(tiny_llama, monkeypatch):
    """Settings whose LLM is the tiny checkpoint (as a worker reads them from the environment), with small
    prefill chunks and packs so that documents of a few hundred tokens take several of each."""
    from core.settings import get_settings

    monkeypatch.setenv("DOCFLASH_LLM_MODEL", str(tiny_llama))
    monkeypatch.setenv("DOCFLASH_PREFILL_CHUNK_TOKENS", "32")
    monkeypatch.setenv("DOCFLASH_PACK_TOKEN_BUDGET", "128")
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()
