"""Celery task definitions (explicit names; arguments are ids, never documents)."""
from __future__ import annotations

from functools import cache

from core.queues import FINALIZE_JOB, PROCESS_DOCUMENTS, WATCH_POLL
from core.service import JobService, job_state_from_settings
from core.storage import S3Storage
from worker.celery_app import app, load_task_modules, settings
from worker.processing import JobProcessor


@cache
def processor() -> JobProcessor:
    """This process's JobProcessor (built after the fork, so connections are not shared across processes)."""
    load_task_modules()
    return JobProcessor(settings, job_state_from_settings(settings), S3Storage(settings))


@app.task(name=PROCESS_DOCUMENTS)
def process_documents(job_id: str, doc_ids: list[str]) -> None:
    """Process one group of a job's documents."""
    processor().process(job_id, doc_ids)


@app.task(name=FINALIZE_JOB)
def finalize_job(job_id: str) -> None:
    """Assemble a job's results files and manifest once all its documents have ended."""
    processor().finalize(job_id)


@app.task(name=WATCH_POLL, ignore_result=True)
def watch_poll(watch_uri: str) -> None:
    """One pass of the S3 drop watcher over `watch_uri` (scheduled by Celery beat when `watch_uri` is set)."""
    from worker.watch import DropWatcher

    watch_settings = settings.model_copy(update={"watch_uri": watch_uri})
    DropWatcher(watch_settings, JobService.from_settings(watch_settings)).poll()
