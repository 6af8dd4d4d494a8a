"""End to end through JobService -> Redis broker -> real `docflash worker` subprocesses -> results in S3."""
from __future__ import annotations

import json
import os
import signal
import uuid

import httpx
import pytest

from core.jobs import JobRequest, JobStatus
from core.service import JobService

pytestmark = pytest.mark.slow

TEXT = ("Celery hands each group of documents to one GPU worker. The worker writes a record per document. "
        "When the last document ends, the results are assembled. ") * 5


def wait_final(service: JobService, tenant: str, job_id: str, wait_for, timeout: float = 60):
    return wait_for(lambda: (job := service.get(tenant, job_id)) is not None and job.status.is_final and job,
                    timeout, f"job {job_id} to finish")


def read_jsonl(service: JobService, tenant: str, job_id: str, name: str) -> list[dict]:
    job = service.get(tenant, job_id)
    return [json.loads(line) for line in b"".join(service.open_output(job, name)).splitlines()]


@pytest.fixture
def service(service_settings) -> JobService:
    return JobService.from_settings(service_settings)


def test_a_job_runs_through_the_worker_to_s3(service: JobService, celery_worker: str, test_bucket: str,
                                             wait_for) -> None:
    bad_uri = f"s3://{test_bucket}/e2e/{uuid.uuid4().hex}/binary.txt"
    service.storage.put(bad_uri, os.urandom(4096))
    job = service.submit(JobRequest(task="stats", documents=[
        {"id": "report", "text": TEXT}, {"id": "note", "text": "One sentence only."}, {"id": "blob", "uri": bad_uri},
    ]), "acme")
    final = wait_final(service, "acme", job.id, wait_for)
    assert final.status == JobStatus.partially_succeeded
    assert (final.counts.succeeded, final.counts.failed, final.started_at is not None) == (2, 1, True)
    results = read_jsonl(service, "acme", job.id, "results")
    assert [(r["id"], r["result"]["sentences"]) for r in results] == [("report", 15), ("note", 1)]
    [error] = read_jsonl(service, "acme", job.id, "errors")
    assert error["id"] == "blob" and "binary.txt" in error["error"]
    url = service.presigned_output_url(final, "results")
    assert [json.loads(line)["id"] for line in httpx.get(url).text.splitlines()] == ["report", "note"]


def test_cancel_a_running_job_keeps_results_so_far(service_settings, celery_worker: str, redis_url: str, test_tasks,
                                                   wait_for) -> None:
    service = JobService.from_settings(service_settings.model_copy(update={"pack_token_budget": 1}))
    key = f"runs-{uuid.uuid4().hex}"
    job = service.submit(JobRequest(task="sleep", options={"seconds": 0.4, "record_url": redis_url, "record_key": key},
                                    documents=[{"id": f"d{i}", "text": TEXT} for i in range(8)]), "acme")
    wait_for(lambda: service.state.redis.llen(key) >= 1, 30, "the first document to start")
    assert service.cancel("acme", job.id).status == JobStatus.cancelling
    final = wait_final(service, "acme", job.id, wait_for)
    assert final.status == JobStatus.cancelled
    ran = [d.decode() for d in service.state.redis.lrange(key, 0, -1)]
    assert 1 <= final.counts.succeeded == len(ran) < 8
    assert final.counts.cancelled == 8 - len(ran) and final.counts.failed == 0
    assert [r["id"] for r in read_jsonl(service, "acme", job.id, "results")] == ran
    assert read_jsonl(service, "acme", job.id, "errors") == []


def test_a_worker_killed_mid_document_is_redelivered_and_each_document_ends_once(
    service_settings, worker_factory, redis_url: str, wait_for, test_tasks
) -> None:
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    limits = {"DOCFLASH_GPU_QUEUE": queue, "DOCFLASH_TASK_SOFT_TIME_LIMIT": "2", "DOCFLASH_TASK_HARD_TIME_LIMIT": "3",
              "DOCFLASH_BROKER_VISIBILITY_TIMEOUT": "4", "DOCFLASH_WARMUP_TASKS": ""}
    service = JobService.from_settings(service_settings.model_copy(update={"gpu_queue": queue, "pack_token_budget": 1}))
    first, _, _ = worker_factory(limits)
    key = f"runs-{uuid.uuid4().hex}"
    job = service.submit(JobRequest(task="sleep", options={"seconds": 1.5, "record_url": redis_url, "record_key": key},
                                    documents=[{"id": f"d{i}", "text": TEXT} for i in range(3)]), "acme")
    assert {ref.kind for ref in service.state.all_refs(job.id)} == {"redis"}
    wait_for(lambda: service.state.redis.llen(key) >= 1, 30, "the first document to start")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    assert service.get("acme", job.id).counts.succeeded == 0

    worker_factory(limits)
    final = wait_final(service, "acme", job.id, wait_for, timeout=90)
    assert final.status == JobStatus.succeeded
    assert final.counts.succeeded == 3 and final.counts.failed == 0
    runs = [d.decode() for d in service.state.redis.lrange(key, 0, -1)]
    assert runs.count("d0") == 2 and sorted(set(runs)) == ["d0", "d1", "d2"]
    assert [r["id"] for r in read_jsonl(service, "acme", job.id, "results")] == ["d0", "d1", "d2"]
    assert service.state.texts(job.id, ["d0", "d1", "d2"]) == {}

    slow = service.submit(JobRequest(task="sleep", options={"seconds": 10}, documents=[{"id": "slow", "text": TEXT}]),
                          "acme")
    assert wait_final(service, "acme", slow.id, wait_for).status == JobStatus.failed
    [error] = read_jsonl(service, "acme", slow.id, "errors")
    assert error["id"] == "slow" and "time limit of 2 s exceeded" in error["error"]

    stuck = service.submit(JobRequest(task="sleep", options={"seconds": 10, "ignore_soft_limit": True},
                                      documents=[{"id": "stuck", "text": TEXT}, {"id": "next", "text": TEXT}]), "acme")
    assert wait_final(service, "acme", stuck.id, wait_for).status == JobStatus.failed
    errors = read_jsonl(service, "acme", stuck.id, "errors")
    assert [e["id"] for e in errors] == ["stuck", "next"]
    assert all("hard time limit of 3 s exceeded" in e["error"] for e in errors)
