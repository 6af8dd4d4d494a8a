"""Celery task names and the Redis lists behind the GPU queue (the broker emulates priorities with one list per
priority level: `<queue>` for priority 0, `<queue>:<n>` for priority n)."""
from __future__ import annotations

from redis import Redis

PROCESS_DOCUMENTS = "docflash.process_documents"
FINALIZE_JOB = "docflash.finalize_job"
WATCH_POLL = "docflash.watch_poll"

PRIORITY_STEPS = list(range(10))
PRIORITY_SEPARATOR = ":"


def queue_list_names(queue: str) -> list[str]:
    """The Redis list names that hold `queue`'s waiting messages, most urgent first."""
    return [queue] + [f"{queue}{PRIORITY_SEPARATOR}{step}" for step in PRIORITY_STEPS[1:]]


def queue_depth(redis: Redis, queue: str) -> int:
    """Number of messages waiting in `queue` over all priority levels (not counting ones being processed)."""
    pipe = redis.pipeline(transaction=False)
    for name in queue_list_names(queue):
        pipe.llen(name)
    return sum(pipe.execute())
