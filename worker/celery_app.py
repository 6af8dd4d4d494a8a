"""The Celery worker application. Models load once per worker process (`worker_process_init`), never in the
forking parent. Run with `docflash worker [--gpu N]` (or `celery -A worker.celery_app worker`)."""
from __future__ import annotations

import importlib

from celery import Celery
from celery.signals import setup_logging, worker_process_init

from core.broker import celery_config
from core.logging import configure_logging, get_logger
from core.queues import WATCH_POLL
from core.settings import get_settings

settings = get_settings()
app = Celery("docflash", include=["worker.jobs"])
app.conf.update(celery_config(settings))
if settings.watch_uri:
    app.conf.beat_schedule = {
        "watch-s3-drop": {"task": WATCH_POLL, "schedule": settings.watch_interval_s, "args": [settings.watch_uri]}
    }


@setup_logging.connect
def _configure_logging(**_: object) -> None:
    configure_logging(settings)


def load_task_modules() -> None:
    """Import the task modules (they register themselves), including `extra_task_modules` from settings."""
    importlib.import_module("worker.tasks")
    for module in settings.extra_task_modules:
        importlib.import_module(module)


@worker_process_init.connect
def _warm_up(**_: object) -> None:
    """Load the configured tasks' models in this pool process, so the first document does not wait for them."""
    from worker.tasks import get_task

    load_task_modules()
    log = get_logger()
    for name in settings.warmup_tasks:
        try:
            get_task(name)
            log.info("task ready", task=name)
        except Exception:
            log.exception("task warm-up failed; its documents will fail until this is fixed", task=name)
