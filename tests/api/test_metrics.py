"""/metrics: service figures read from Redis (so every replica agrees) and per-replica HTTP figures."""
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def isolated_settings(api_settings, redis_client):
    """Settings with a Redis prefix and queue of their own, so the figures count only this test's jobs."""
    tag = uuid.uuid4().hex[:8]
    settings = api_settings.model_copy(
        update={"redis_prefix": f"docflash-test-metrics-{tag}:", "gpu_queue": f"docflash.test.metrics.{tag}"}
    )
    yield settings
    keys = list(redis_client.scan_iter(match=f"{settings.redis_prefix}*"))
    keys += list(redis_client.scan_iter(match=f"{settings.gpu_queue}*"))
    if keys:
        redis_client.delete(*keys)


async def test_service_figures_come_from_redis_for_every_replica(isolated_settings, auth):
    replica_a, replica_b = create_app(isolated_settings), create_app(isolated_settings)
    transport = httpx.ASGITransport(app=replica_a)
    async with httpx.AsyncClient(transport=transport, base_url="http://a.test") as a:
        ids = []
        for texts in (["one short text."], ["first of two.", "second of two."], ["third job."]):
            body = {"task": "stats", "documents": [{"text": text} for text in texts]}
            ids.append((await a.post("/v1/jobs", json=body, headers=auth["acme"])).json()["id"])
        await a.post(f"/v1/jobs/{ids[1]}/cancel", headers=auth["acme"])
    transport = httpx.ASGITransport(app=replica_b)
    async with httpx.AsyncClient(transport=transport, base_url="http://b.test") as b:
        response = await b.get("/metrics")

    assert response.status_code == 200
    values = samples(response.text)
    # one pass per job, plus the finalize task that cancelling a job with nothing left to run queues
    assert values[("docflash_queue_depth", (("queue", isolated_settings.gpu_queue),))] == 4
    assert values[("docflash_jobs", (("status", "queued"),))] == 2
    assert values[("docflash_jobs", (("status", "cancelling"),))] == 1
    assert values[("docflash_jobs", (("status", "succeeded"),))] == 0
    assert values[("docflash_documents", (("state", "queued"),))] == 2
    assert values[("docflash_documents", (("state", "cancelled"),))] == 2


async def test_http_requests_are_counted_by_route_template_and_status(client):
    before = samples((await client.get("/metrics")).text)
    key = ("docflash_api_requests_total", (("method", "GET"), ("route", "/v1/jobs/{job_id}"), ("status", "401")))

    for _ in range(3):
        await client.get(f"/v1/jobs/{uuid.uuid4().hex}")
    after = samples((await client.get("/metrics")).text)

    assert after[key] - before.get(key, 0) == 3


async def test_jobs_older_than_the_window_are_not_counted(isolated_settings, auth):
    settings = isolated_settings.model_copy(update={"metrics_window_s": 1})
    body = {"task": "stats", "documents": [{"text": "a short text."}]}
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://a.test") as a:
        await a.post("/v1/jobs", json=body, headers=auth["acme"])
        fresh = samples((await a.get("/metrics")).text)
    time.sleep(1.2)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://b.test") as b:
        later = samples((await b.get("/metrics")).text)

    assert fresh[("docflash_jobs", (("status", "queued"),))] == 1
    assert later[("docflash_jobs", (("status", "queued"),))] == 0
    assert later[("docflash_queue_depth", (("queue", settings.gpu_queue),))] == 1
