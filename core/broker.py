"""The Celery configuration shared by clients and workers, and a client that sends tasks by name (so `core/` and
`api/` never import the worker code)."""
from __future__ import annotations

import threading
from typing import Any

from celery import Celery
from celery.events.dispatcher import EventDispatcher

from core.queues import FINALIZE_JOB, PRIORITY_SEPARATOR, PRIORITY_STEPS, PROCESS_DOCUMENTS
from core.settings import Settings


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings for the Redis broker: late acks, no prefetch, redelivery after the visibility timeout."""
    return {
        "broker_url": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": settings.broker_visibility_timeout,
            "unacked_restore_interval": settings.broker_restore_interval_s,
            # A worker that dies while restoring must not block restores for kombu's default 5 minutes;
            # two restorers at once only deliver a message twice, which the pipeline tolerates.
            "unacked_mutex_expire": max(10, int(5 * settings.broker_restore_interval_s)),
            "priority_steps": PRIORITY_STEPS,
            "sep": PRIORITY_SEPARATOR,
            "queue_order_strategy": "priority",
        },
        "task_default_queue": settings.gpu_queue,
        "task_create_missing_queues": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_soft_time_limit": settings.task_soft_time_limit,
        "task_time_limit": settings.task_hard_time_limit,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "worker_prefetch_multiplier": 1,
        "worker_hijack_root_logger": False,
        "enable_utc": True,
    }


class TaskSender:
    """Sends docflash's Celery tasks by name; arguments are ids only, never documents."""

    def __init__(self, settings: Settings):
        self._queue = settings.gpu_queue
        self.app = Celery("docflash-client")
        self.app.conf.update(celery_config(settings))
        self._local = threading.local()

    def _events(self) -> EventDispatcher:
        """This thread's dispatcher of task-sent events. Celery's shared one holds a lock across each event's
        round trip to Redis, which made the API's request threads queue behind one another."""
        dispatcher = getattr(self._local, "events", None)
        if dispatcher is None:
            dispatcher = self._local.events = self.app.events.Dispatcher(enabled=False)
        return dispatcher

    def process_documents(self, job_id: str, doc_ids: list[str], priority: int = 0) -> None:
        """Queue one GPU pass over `doc_ids` of job `job_id`."""
        self.app.send_task(PROCESS_DOCUMENTS, args=[job_id, doc_ids], queue=self._queue, priority=priority,
                           event_dispatcher=self._events())

    def finalize_job(self, job_id: str) -> None:
        """Queue the assembly of a job's results files and manifest."""
        self.app.send_task(FINALIZE_JOB, args=[job_id], queue=self._queue, event_dispatcher=self._events())
