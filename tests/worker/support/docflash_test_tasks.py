"""A test-only task, loaded by test workers through DOCFLASH_EXTRA_TASK_MODULES: `sleep` waits `seconds` per
document (so a test can kill a worker mid-document; with `ignore_soft_limit` it sleeps on through the soft
time limit, into the hard one) and appends each run's document id to the Redis list `record_key` at
`record_url` when those are set."""
from __future__ import annotations

import time

from billiard.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, ConfigDict, Field
from redis import Redis

from core.task_specs import TASK_OPTIONS
from worker.tasks.base import Document, Task, register_task


class SleepOptions(BaseModel):
    """Options of the `sleep` test task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seconds: float = Field(0.0, ge=0, le=60)
    ignore_soft_limit: bool = False
    record_url: str | None = None
    record_key: str | None = None


TASK_OPTIONS.setdefault("sleep", SleepOptions)


@register_task
class SleepTask(Task):
    """Sleeps, then returns the document's length; each run is appended to the Redis list `record_key`."""

    name = "sleep"

    def process(self, document: Document, options: SleepOptions) -> dict:
        """Record the start of the run, sleep, return {"chars": n}."""
        if options.record_url and options.record_key:
            Redis.from_url(options.record_url).rpush(options.record_key, document.id)
        try:
            time.sleep(options.seconds)
        except SoftTimeLimitExceeded:
            if not options.ignore_soft_limit:
                raise
            time.sleep(options.seconds)
        return {"chars": len(document.text)}
