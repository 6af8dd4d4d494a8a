"""The per-document pipeline and finalize, driven directly (no Celery) against real Redis and S3."""
from __future__ import annotations

import json
import uuid

import pytest
from pydantic import BaseModel

from core.documents import DocumentError
from core.jobs import JobRequest, JobStatus
from core.service import JobService
from worker.outputs import doc_record, doc_uri, write_doc_records
from worker.processing import MAX_ATTEMPTS, JobProcessor, run_task
from worker.tasks import Document, Task

TEXT = "Redis keeps the job state. Workers write one record per document. The last one assembles the results."


def groups_of(service: JobService, job_id: str) -> list[list[str]]:
    """The doc id groups queued for `job_id`, in submission order."""
    import base64

    groups = []
    for raw in reversed(service.state.redis.lrange(service.settings.gpu_queue, 0, -1)):
        args = json.loads(base64.b64decode(json.loads(raw)["body"]))[0]
        if args[0] == job_id:
            groups.append(args[1])
    return groups


def read_jsonl(service: JobService, uri: str) -> list[dict]:
    return [json.loads(line) for line in service.storage.get(uri).decode().splitlines()]


def run_all(service: JobService, processor: JobProcessor, job_id: str) -> None:
    for group in groups_of(service, job_id):
        processor.process(job_id, group)


def test_a_job_runs_to_results_errors_and_manifest(offline_service: JobService, processor: JobProcessor,
                                                   test_bucket: str) -> None:
    prefix = f"s3://{test_bucket}/proc-in/{uuid.uuid4().hex}"
    offline_service.storage.put_many({
        f"{prefix}/latin1.txt": "Crème brûlée. Café au lait. Déjà vu, naïve façade.".encode("cp1252"),
        f"{prefix}/junk.txt": bytes(range(256)) * 8,
        f"{prefix}/broken.pdf": b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage",
    })
    documents = [{"id": "inline", "text": TEXT}] + [
        {"uri": f"{prefix}/{name}"} for name in ("latin1.txt", "junk.txt", "broken.pdf", "absent.md")
    ]
    job = offline_service.submit(JobRequest(task="stats", documents=documents), "acme")
    run_all(offline_service, processor, job.id)

    final = offline_service.get("acme", job.id)
    assert final.status == JobStatus.partially_succeeded
    assert (final.counts.succeeded, final.counts.failed, final.counts.running, final.counts.queued) == (2, 3, 0, 0)
    results = read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")
    assert [r["id"] for r in results] == ["inline", "latin1.txt"]
    assert results[0]["result"]["sentences"] == 3
    assert results[1]["result"]["characters"] == len("Crème brûlée. Café au lait. Déjà vu, naïve façade.")
    errors = {e["id"]: e["error"] for e in read_jsonl(offline_service, f"{job.output_uri}/errors.jsonl")}
    assert set(errors) == {"junk.txt", "broken.pdf", "absent.md"}
    assert errors["absent.md"].startswith("absent.md: no object at")
    assert "broken.pdf" in errors["broken.pdf"] and "junk.txt" in errors["junk.txt"]
    manifest = json.loads(offline_service.storage.get(f"{job.output_uri}/manifest.json"))
    assert manifest["status"] == "partially_succeeded" and manifest["job_id"] == job.id
    assert manifest["counts"] == {"total": 5, "succeeded": 2, "failed": 3, "cancelled": 0}
    assert manifest["files"]["results"] == f"{job.output_uri}/results.jsonl"
    assert manifest["timings"]["wall_s"] >= 0


@pytest.mark.parametrize(("redis_inputs_max_bytes", "kind"), [(64 * 1024, "redis"), (0, "inline")],
                         ids=["texts-in-redis", "texts-in-s3"])
def test_a_redelivered_group_reads_inline_texts_where_they_were_kept(
    offline_service: JobService, processor: JobProcessor, redis_inputs_max_bytes: int, kind: str
) -> None:
    offline_service.settings = offline_service.settings.model_copy(
        update={"redis_inputs_max_bytes": redis_inputs_max_bytes}
    )
    texts = {"fr": "Première phrase. Deuxième phrase.", "en": TEXT}
    job = offline_service.submit(JobRequest(task="stats", documents=[{"id": i, "text": t} for i, t in texts.items()]),
                                 "acme")
    assert {ref.kind for ref in offline_service.state.all_refs(job.id)} == {kind}
    # A first attempt started both documents, then its worker died.
    offline_service.state.begin_documents(job.id, list(texts), MAX_ATTEMPTS)
    run_all(offline_service, processor, job.id)
    results = read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")
    assert [(r["id"], r["result"]["sentences"]) for r in results] == [("fr", 2), ("en", 3)]
    assert offline_service.get("acme", job.id).status == JobStatus.succeeded
    assert offline_service.state.texts(job.id, list(texts)) == {}


def test_an_inline_text_missing_from_redis_becomes_an_error_line(offline_service: JobService,
                                                                 processor: JobProcessor) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"id": "kept", "text": TEXT},
                                                                    {"id": "lost", "text": TEXT}]), "acme")
    offline_service.state.redis.hdel(f"{offline_service.state.prefix}job:{job.id}:texts", "lost")
    run_all(offline_service, processor, job.id)
    assert [r["id"] for r in read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")] == ["kept"]
    [error] = read_jsonl(offline_service, f"{job.output_uri}/errors.jsonl")
    assert error == {"id": "lost", "error": "lost.txt: its inline text is no longer in Redis"}


def test_jsonl_entries_and_their_errors_become_documents(offline_service: JobService, processor: JobProcessor,
                                                         test_bucket: str) -> None:
    uri = f"s3://{test_bucket}/proc-in/{uuid.uuid4().hex}/batch.jsonl"
    lines = [b'{"id": "a", "text": "One."}', b'{"id": "b", "text": 7}', b'{"id": "c", "text": "Two."}']
    offline_service.storage.put(uri, b"\n".join(lines) + b"\n")
    job = offline_service.submit(JobRequest(task="noop", input_uri=uri), "acme")
    run_all(offline_service, processor, job.id)
    assert [r["id"] for r in read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")] == ["a", "c"]
    [error] = read_jsonl(offline_service, f"{job.output_uri}/errors.jsonl")
    assert error["id"] == "b" and "line 2" in error["error"] and "'text' must be a string" in error["error"]


def test_a_redelivered_group_runs_nothing_twice(offline_service: JobService, processor: JobProcessor,
                                                redis_url: str, test_tasks) -> None:
    key = f"runs-{uuid.uuid4().hex}"
    job = offline_service.submit(JobRequest(task="sleep", options={"record_url": redis_url, "record_key": key},
                                            documents=[{"id": f"d{i}", "text": TEXT} for i in range(4)]), "acme")
    run_all(offline_service, processor, job.id)
    before = offline_service.storage.get(f"{job.output_uri}/results.jsonl")
    run_all(offline_service, processor, job.id)
    assert sorted(offline_service.state.redis.lrange(key, 0, -1)) == [b"d0", b"d1", b"d2", b"d3"]
    assert offline_service.get("acme", job.id).counts.succeeded == 4
    assert offline_service.storage.get(f"{job.output_uri}/results.jsonl") == before


def test_a_retry_reuses_the_record_stored_before_a_crash(offline_service: JobService, processor: JobProcessor,
                                                         redis_url: str, test_tasks) -> None:
    key = f"runs-{uuid.uuid4().hex}"
    job = offline_service.submit(JobRequest(task="sleep", options={"record_url": redis_url, "record_key": key},
                                            documents=[{"id": "stored", "text": TEXT}, {"id": "fresh", "text": TEXT}]),
                                 "acme")
    # A first attempt started both documents and stored one record, then its worker died.
    offline_service.state.begin_documents(job.id, ["stored", "fresh"], MAX_ATTEMPTS)
    write_doc_records(offline_service.storage, job.output_uri,
                      [doc_record("stored", result={"chars": -1}, elapsed_s=0.5)])
    run_all(offline_service, processor, job.id)
    assert offline_service.state.redis.lrange(key, 0, -1) == [b"fresh"]
    results = {r["id"]: r["result"] for r in read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")}
    assert results == {"stored": {"chars": -1}, "fresh": {"chars": len(TEXT)}}


def test_a_document_that_keeps_losing_its_worker_fails_after_max_attempts(
    offline_service: JobService, processor: JobProcessor
) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"id": "killer", "text": TEXT}]), "acme")
    for _ in range(MAX_ATTEMPTS):
        offline_service.state.begin_documents(job.id, ["killer"], MAX_ATTEMPTS)
    run_all(offline_service, processor, job.id)
    [error] = read_jsonl(offline_service, f"{job.output_uri}/errors.jsonl")
    assert error["id"] == "killer" and f"gave up after {MAX_ATTEMPTS} attempts" in error["error"]
    assert offline_service.get("acme", job.id).status == JobStatus.failed


def test_cancel_keeps_finished_results_and_skips_the_rest(offline_service: JobService, processor: JobProcessor) -> None:
    docs = [{"id": f"d{i}", "text": TEXT} for i in range(6)]
    job = offline_service.submit(JobRequest(task="noop", documents=docs), "acme")
    first, *rest = groups_of(offline_service, job.id)
    processor.process(job.id, first)
    assert offline_service.cancel("acme", job.id).status == JobStatus.cancelling
    for group in rest:
        processor.process(job.id, group)
    processor.finalize(job.id)
    final = offline_service.get("acme", job.id)
    assert final.status == JobStatus.cancelled
    assert (final.counts.succeeded, final.counts.cancelled, final.counts.failed) == (len(first), 6 - len(first), 0)
    assert [r["id"] for r in read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")] == first
    assert offline_service.storage.get(f"{job.output_uri}/errors.jsonl") == b""


def test_finalize_twice_writes_the_same_files(offline_service: JobService, processor: JobProcessor) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"text": TEXT}, {"text": " "}]), "acme")
    run_all(offline_service, processor, job.id)
    names = ("results.jsonl", "errors.jsonl", "manifest.json")
    first = [offline_service.storage.get(f"{job.output_uri}/{n}") for n in names]
    assert processor.finalize(job.id) == JobStatus.partially_succeeded
    assert [offline_service.storage.get(f"{job.output_uri}/{n}") for n in names] == first
    assert processor.finalize("no-such-job") is None


def test_finalize_waits_for_every_document(offline_service: JobService, processor: JobProcessor) -> None:
    docs = [{"id": f"d{i}", "text": TEXT} for i in range(3)]
    job = offline_service.submit(JobRequest(task="noop", documents=docs), "acme")
    processor.process(job.id, ["d0", "d1"])
    assert offline_service.get("acme", job.id).counts.unfinished == 1
    assert processor.finalize(job.id) is None
    assert not offline_service.storage.exists(f"{job.output_uri}/manifest.json")
    processor.process(job.id, ["d2"])
    assert offline_service.get("acme", job.id).status == JobStatus.succeeded


class _Options(BaseModel):
    pass


class _FragileTask(Task):
    """Fails the whole batch when any document says "boom"; refuses documents saying "bad"."""

    name = "fragile"

    def process(self, document: Document, options: BaseModel) -> dict:
        if "bad" in document.text:
            raise DocumentError(f"{document.id}: bad text")
        return {"words": len(document.text.split())}

    def process_batch(self, documents, options):
        if any("boom" in d.text for d in documents):
            raise RuntimeError("device-side assert")
        return super().process_batch(documents, options)


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["a b", "bad x", "c"], ["ok", "bad text", "ok"]),
        (["a b", "boom now", "c d e"], ["ok", "task failed: device-side assert", "ok"]),
        (["boom"], ["task failed: device-side assert"]),
    ],
    ids=["document-error", "batch-failure-retried-alone", "single-failure"],
)
def test_run_task_isolates_failing_documents(texts: list[str], expected: list[str]) -> None:
    documents = [Document(id=f"d{i}", text=t, metadata={"name": f"d{i}.txt"}) for i, t in enumerate(texts)]
    records = run_task(_FragileTask(), documents, _Options())
    assert [r["id"] for r in records] == [d.id for d in documents]
    for record, want in zip(records, expected):
        if want == "ok":
            assert record["status"] == "succeeded" and record["result"]["words"] > 0
        else:
            assert record["status"] == "failed" and want in record["error"]


def test_doc_records_are_keyed_safely() -> None:
    assert doc_uri("s3://b/j", "a/b c") == "s3://b/j/docs/a%2Fb%20c.json"
    with pytest.raises(ValueError):
        doc_record("x", result={}, error="both", elapsed_s=0)


def test_failing_a_group_records_only_its_unfinished_documents(offline_service: JobService,
                                                               processor: JobProcessor) -> None:
    job = offline_service.submit(JobRequest(task="noop", documents=[{"id": f"d{i}", "text": TEXT} for i in range(3)]),
                                 "acme")
    offline_service.state.begin_documents(job.id, ["d0", "d1", "d2"], MAX_ATTEMPTS)
    offline_service.state.finish_documents(job.id, [("d0", "succeeded", "")])
    write_doc_records(offline_service.storage, job.output_uri, [doc_record("d0", result={"chars": 1}, elapsed_s=0.1)])
    processor.fail_documents(job.id, ["d0", "d1", "d2"], "hard time limit of 3 s exceeded")
    final = offline_service.get("acme", job.id)
    assert final.status == JobStatus.partially_succeeded and (final.counts.succeeded, final.counts.failed) == (1, 2)
    errors = read_jsonl(offline_service, f"{job.output_uri}/errors.jsonl")
    assert [(e["id"], e["error"]) for e in errors] == [("d1", "d1.txt: hard time limit of 3 s exceeded"),
                                                       ("d2", "d2.txt: hard time limit of 3 s exceeded")]
    assert [r["id"] for r in read_jsonl(offline_service, f"{job.output_uri}/results.jsonl")] == ["d0"]
