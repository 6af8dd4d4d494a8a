"""TaskSender against real Redis: tasks land on the queue and each one's task-sent event reaches the event
channel (what Flower shows as queued), also when many threads send at once."""
from __future__ import annotations

import base64
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis

from core.broker import TaskSender
from core.queues import PROCESS_DOCUMENTS, queue_list_names


def decode(message: dict) -> dict:
    """The JSON body of a kombu message as stored in Redis."""
    body = message["body"]
    if message["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    return json.loads(body)


@pytest.mark.parametrize("threads", [1, 8], ids=["one-thread", "eight-threads"])
def test_every_queued_task_publishes_its_task_sent_event(service_settings, redis_url: str, threads: int) -> None:
    queue = f"broker-test-{uuid.uuid4().hex[:8]}"
    sender = TaskSender(service_settings.model_copy(update={"gpu_queue": queue}))
    redis = Redis.from_url(redis_url)
    events = redis.pubsub()
    events.psubscribe(f"/{redis.connection_pool.connection_kwargs['db']}.celeryev*")
    assert (events.get_message(timeout=5) or {}).get("type") == "psubscribe"
    jobs = [f"job-{i}-{uuid.uuid4().hex[:6]}" for i in range(24)]
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda job_id: sender.process_documents(job_id, ["d0", "d1"], priority=3), jobs))
        queued = [json.loads(raw) for name in queue_list_names(queue) for raw in redis.lrange(name, 0, -1)]
        task_ids = {message["headers"]["id"]: decode(message)[0][0] for message in queued}
        assert sorted(task_ids.values()) == sorted(jobs)

        sent: dict[str, dict] = {}
        deadline = time.monotonic() + 10
        while len(sent) < len(jobs) and time.monotonic() < deadline:
            message = events.get_message(timeout=0.5)
            if message is not None and message["type"] == "pmessage":
                event = decode(json.loads(message["data"]))
                if event.get("type") == "task-sent" and event["uuid"] in task_ids:
                    sent[event["uuid"]] = event
    finally:
        events.close()
        redis.delete(*queue_list_names(queue))
    assert set(sent) == set(task_ids)
    assert {(event["name"], event["queue"]) for event in sent.values()} == {(PROCESS_DOCUMENTS, queue)}
