"""Celery task definitions (explicit names; arguments are ids, never documents)."""
from __future__ import annotations

from functools import cache

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery import Task

from core.logging import get_logger
from core.queues import FINALIZE_JOB, PROCESS_DOCUMENTS, WATCH_POLL
from core.service import JobService, job_state_from_settings
from core.storage import S3Storage
from worker.celery_app import app, load_task_modules, settings
from worker.processing import MAX_ATTEMPTS, JobProcessor


@cache
def processor() -> JobProcessor:
    """This process's JobProcessor (built after the fork, so connections are not shared across processes)."""
    load_task_modules()
    return JobProcessor(settings, job_state_from_settings(settings), S3Storage(settings))


class DocumentsTask(Task):
    """Retries a group whose processing raised (storage or broker trouble: document and model errors never
    escape the pipeline), and once it gives up (or the hard time limit killed it) records its unfinished
    documents as failed, so the job still ends. A lost worker is left to redelivery."""

    autoretry_for = (Exception,)
    max_retries = MAX_ATTEMPTS - 1
    retry_backoff = 2
    retry_jitter = False

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Record the group's documents without an outcome as failed (not for a lost worker)."""
        if isinstance(exc, WorkerLostError):
            return
        job_id, doc_ids = args
        reason = (f"hard time limit of {settings.task_hard_time_limit} s exceeded"
                  if isinstance(exc, TimeLimitExceeded) else f"processing failed: {type(exc).__name__}: {exc}")
        try:
            processor().fail_documents(job_id, doc_ids, reason)
        except Exception:
            get_logger(job_id=job_id).exception("could not record the failed documents", doc_ids=doc_ids)


@app.task(name=PROCESS_DOCUMENTS, base=DocumentsTask)
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
