"""JobService against real Redis and S3, with no worker consuming its queue (so the queued tasks can be read)."""
from __future__ import annotations

import base64
import json
import uuid

import pytest
from redis import Redis

from core.jobs import JobRequest, JobStatus
from core.queues import FINALIZE_JOB, PROCESS_DOCUMENTS, queue_depth, queue_list_names
from core.service import InvalidJobError, JobService


def queued_messages(service: JobService) -> list[tuple[str, int, list]]:
    """(task name, priority list index, args) of each waiting message."""
    redis: Redis = service.state.redis
    found = []
    for level, name in enumerate(queue_list_names(service.settings.gpu_queue)):
        for raw in redis.lrange(name, 0, -1):
            message = json.loads(raw)
            found.append((message["headers"]["task"], level, json.loads(base64.b64decode(message["body"]))[0]))
    return found


@pytest.mark.parametrize(("redis_inputs_max_bytes", "in_redis"), [(1180, True), (1179, False)],
                         ids=["texts-up-to-the-limit-in-redis", "texts-over-the-limit-in-s3"])
def test_submit_stores_inline_texts_and_queues_packed_groups_of_ids(
    offline_service: JobService, redis_inputs_max_bytes: int, in_redis: bool
) -> None:
    offline_service.settings = offline_service.settings.model_copy(
        update={"redis_inputs_max_bytes": redis_inputs_max_bytes}
    )
    texts = ["short one. " * 10, "short two. " * 10, "a much longer document. " * 40]
    ids = [f"t{i}" for i in range(3)]
    job = offline_service.submit(
        JobRequest(task="stats", documents=[{"id": i, "text": t} for i, t in zip(ids, texts)], priority=3), "acme"
    )
    assert job.status == JobStatus.queued and job.counts.total == 3
    assert job.output_uri == f"{offline_service.settings.output_uri}/acme/{job.id}"
    inputs_uri = f"{job.output_uri}/inputs/documents.jsonl"
    if in_redis:
        assert offline_service.state.texts(job.id, ids) == {i: t.encode() for i, t in zip(ids, texts)}
        assert not offline_service.storage.exists(inputs_uri)
    else:
        stored = offline_service.storage.get(inputs_uri).decode().splitlines()
        assert [json.loads(line) for line in stored] == [{"id": i, "text": t} for i, t in zip(ids, texts)]
        assert offline_service.state.texts(job.id, ids) == {}
    messages = queued_messages(offline_service)
    assert [(task, level) for task, level, _ in messages] == [(PROCESS_DOCUMENTS, 3)] * 2
    assert sorted(args[1] for *_, args in messages) == [["t0", "t1"], ["t2"]]
    assert all(args[0] == job.id for *_, args in messages)
    assert queue_depth(offline_service.state.redis, offline_service.settings.gpu_queue) == 2


def test_input_uri_prefix_submits_every_document(offline_service: JobService, test_bucket: str) -> None:
    base = f"s3://{test_bucket}/svc-in/{uuid.uuid4().hex}"
    offline_service.storage.put_many({f"{base}/a.txt": b"alpha", f"{base}/b.jsonl": b'{"id": "x", "text": "y"}\n'})
    job = offline_service.submit(JobRequest(task="noop", input_uri=base + "/"), "acme")
    assert job.counts.total == 2
    assert [ref.id for ref in offline_service.state.all_refs(job.id)] == ["a.txt", "x"]


def test_same_idempotency_key_returns_the_same_job(offline_service: JobService) -> None:
    request = JobRequest(task="noop", documents=[{"text": "x"}], idempotency_key="nightly-2026-11-30")
    first = offline_service.submit(request, "acme")
    assert offline_service.submit(request, "acme").id == first.id
    assert offline_service.submit(request, "beta").id != first.id
    assert len(queued_messages(offline_service)) == 2


def test_tenants_see_only_their_own_jobs(offline_service: JobService) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"text": "x"}]), "acme")
    assert offline_service.get("acme", job.id).id == job.id
    assert offline_service.get("beta", job.id) is None
    assert offline_service.cancel("beta", job.id) is None
    assert [j.id for j in offline_service.list("acme")[0]] == [job.id]
    assert offline_service.list("beta") == ([], None)


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        ({"task": "translate", "documents": [{"text": "x"}]}, "task"),
        ({"task": "summarize", "options": {"sentences": 0}, "documents": [{"text": "x"}]}, "options.sentences"),
        ({"task": "classify", "options": {"labels": ["only"]}, "documents": [{"text": "x"}]}, "options.labels"),
        ({"task": "stats", "options": {"colour": 1}, "documents": [{"text": "x"}]}, "options.colour"),
        ({"task": "stats", "input_uri": "s3://docflash-test/nothing-here/"}, "input_uri"),
        ({"task": "stats", "model": "another/model", "documents": [{"text": "x"}]}, "model"),
    ],
    ids=["unknown-task", "bad-option-value", "too-few-labels", "unknown-option", "empty-prefix", "model-not-served"],
)
def test_bad_submissions_raise_invalid_job_error_naming_the_field(
    offline_service: JobService, request_body: dict, field: str
) -> None:
    with pytest.raises(InvalidJobError) as caught:
        offline_service.submit(JobRequest.model_validate(request_body), "acme")
    assert caught.value.field == field
    assert queued_messages(offline_service) == []


def test_a_job_may_name_the_model_the_workers_run(offline_service: JobService) -> None:
    offline_service.settings = offline_service.settings.model_copy(update={"llm_model": "org/served-model"})
    job = offline_service.submit(JobRequest(task="noop", model="org/served-model", documents=[{"text": "x"}]), "acme")
    assert job.model == "org/served-model"
    with pytest.raises(InvalidJobError, match="runs 'org/served-model', not 'org/other'") as caught:
        offline_service.submit(JobRequest(task="noop", model="org/other", documents=[{"text": "x"}]), "acme")
    assert caught.value.field == "model"


def test_the_served_model_name_stands_for_a_model_path(offline_service: JobService) -> None:
    offline_service.settings = offline_service.settings.model_copy(
        update={"llm_model": "/models/model", "served_model": "org/m"}
    )
    job = offline_service.submit(JobRequest(task="noop", model="org/m", documents=[{"text": "x"}]), "acme")
    assert job.model == "org/m"
    with pytest.raises(InvalidJobError, match="runs 'org/m'"):
        offline_service.submit(JobRequest(task="noop", model="/models/model", documents=[{"text": "x"}]), "acme")


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ({"documents": [{"uri": "s3://docflash-test/jobs/beta/j1/results.jsonl"}]}, "documents[0].uri"),
        ({"input_uri": "s3://docflash-test/jobs/beta/"}, "input_uri"),
        ({"input_uri": "s3://docflash-test/jo"}, "input_uri"),
    ],
    ids=["other-tenant-object", "other-tenant-prefix", "prefix-spanning-all-tenants"],
)
def test_inputs_may_not_read_other_tenants_job_files(offline_service: JobService, source: dict, field: str) -> None:
    with pytest.raises(InvalidJobError, match="other tenants") as caught:
        offline_service.submit(JobRequest(task="noop", **source), "acme")
    assert caught.value.field == field


def test_a_missing_input_bucket_is_refused_naming_input_uri(offline_service: JobService) -> None:
    with pytest.raises(InvalidJobError, match="cannot list") as caught:
        offline_service.submit(JobRequest(task="noop", input_uri="s3://no-such-bucket-here/in/"), "acme")
    assert caught.value.field == "input_uri"


def test_an_unreachable_output_bucket_is_refused_naming_output_uri(
    offline_service: JobService, test_bucket: str
) -> None:
    request = JobRequest(task="noop", documents=[{"text": "x"}], output_uri="s3://no-such-bucket-here/out")
    with pytest.raises(InvalidJobError, match="cannot write") as caught:
        offline_service.submit(request, "acme")
    assert caught.value.field == "output_uri"
    job = offline_service.submit(
        JobRequest(task="noop", documents=[{"text": "x"}], output_uri=f"s3://{test_bucket}/custom"), "acme"
    )
    assert job.output_uri == f"s3://{test_bucket}/custom/acme/{job.id}"


def test_bad_tenant_names_are_refused(offline_service: JobService) -> None:
    with pytest.raises(ValueError, match="tenant"):
        offline_service.submit(JobRequest(task="noop", documents=[{"text": "x"}]), "../etc")


def test_cancel_before_any_worker_cancels_every_document(offline_service: JobService) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"text": "a"}, {"text": "b"}]), "acme")
    cancelled = offline_service.cancel("acme", job.id)
    assert cancelled.status == JobStatus.cancelling
    assert cancelled.counts.cancelled == 2 and cancelled.counts.queued == 0
    assert sorted(task for task, *_ in queued_messages(offline_service)) == [FINALIZE_JOB, PROCESS_DOCUMENTS]


def test_outputs_are_unavailable_until_the_job_is_final(offline_service: JobService) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"text": "a"}]), "acme")
    assert offline_service.open_output(job, "results") is None
    assert offline_service.presigned_output_url(job, "errors") is None
    with pytest.raises(ValueError, match="name"):
        offline_service.open_output(job, "secrets")
