"""Job state in Redis: atomic counters, once-only outcomes, cancel, listing and idempotency."""
from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from redis import Redis

from core.inputs import DocRef, InvalidJobError
from core.jobs import Counts, Job, JobStatus
from core.state import JobState, utcnow


@pytest.fixture
def state(redis_url: str) -> JobState:
    return JobState(Redis.from_url(redis_url), f"state-test-{uuid.uuid4().hex[:8]}:", 3600)


def make_job(state: JobState, n_docs: int, tenant: str = "acme", key: str | None = None, age_s: float = 0,
             texts: dict[str, bytes] | None = None) -> str:
    job = Job(
        id=uuid.uuid4().hex,
        tenant=tenant,
        task="stats",
        options={"tokenizer": "encoder"},
        status=JobStatus.queued,
        counts=Counts(total=n_docs),
        created_at=utcnow() - timedelta(seconds=age_s),
        output_uri="s3://bucket/jobs/x",
    )
    refs = [DocRef(i, f"d{i}", "object", f"s3://bucket/in/d{i}.txt", f"d{i}.txt", 10) for i in range(n_docs)]
    return state.create(job, refs, key, texts)


def test_new_job_reads_back_with_all_documents_queued(state: JobState) -> None:
    job_id = make_job(state, 3)
    job = state.get(job_id)
    assert (job.status, job.counts) == (JobStatus.queued, Counts(total=3, queued=3))
    assert [ref.id for ref in state.all_refs(job_id)] == ["d0", "d1", "d2"]
    assert state.refs(job_id, ["d2", "nope"])[0].uri == "s3://bucket/in/d2.txt"
    assert state.refs(job_id, ["d2", "nope"])[1] is None
    assert state.get("missing") is None


def test_concurrent_and_repeated_finishes_count_each_document_once(redis_url: str, state: JobState) -> None:
    n_docs = 200
    job_id = make_job(state, n_docs)

    def worker(offset: int) -> list[int]:
        mine = JobState(Redis.from_url(redis_url), state.prefix, 3600)
        left = []
        for i in range(offset, offset + n_docs):
            doc = f"d{i % n_docs}"
            mine.begin_documents(job_id, [doc], 3)
            left.append(mine.finish_documents(job_id, [(doc, "failed" if i % n_docs % 5 == 0 else "succeeded", "")]))
        return left

    with ThreadPoolExecutor(8) as pool:
        remaining = [r for rs in pool.map(worker, [k * 25 for k in range(8)]) for r in rs]
    job = state.get(job_id)
    assert job.counts == Counts(total=n_docs, succeeded=160, failed=40, running=0, queued=0)
    assert min(remaining) == 0 and state.remaining(job_id) == 0
    assert job.status == JobStatus.running and job.started_at is not None


def test_begin_document_reports_attempts_and_done_documents(state: JobState) -> None:
    job_id = make_job(state, 2)
    assert state.begin_documents(job_id, ["d0"], 2) == ["first"]
    assert state.get(job_id).counts.running == 1
    assert state.begin_documents(job_id, ["d0", "d1"], 2) == ["retry", "first"]
    assert state.begin_documents(job_id, ["d0"], 2) == ["exhausted"]
    assert state.finish_documents(job_id, [("d0", "succeeded", '{"id": "d0"}'), ("d0", "failed", '{"x": 1}')]) == 1
    assert state.records(job_id) == {"d0": {"id": "d0"}}
    assert state.begin_documents(job_id, ["d0"], 2) == ["done"]
    assert state.get(job_id).counts == Counts(total=2, succeeded=1, running=1)
    with pytest.raises(ValueError, match="outcome"):
        state.finish_documents(job_id, [("d1", "skipped", "")])


def test_cancel_records_unstarted_documents_as_cancelled(state: JobState) -> None:
    job_id = make_job(state, 4)
    state.begin_documents(job_id, ["d0", "d1"], 3)
    state.finish_documents(job_id, [("d0", "succeeded", "")])
    previous, remaining = state.cancel(job_id)
    assert (previous, remaining) == (JobStatus.running, 1)
    job = state.get(job_id)
    assert job.status == JobStatus.cancelling
    assert job.counts == Counts(total=4, succeeded=1, running=1, cancelled=2)
    assert state.begin_documents(job_id, ["d2", "d1"], 3) == ["done", "cancelled"]
    assert state.finish_documents(job_id, [("d1", "succeeded", "")]) == 0
    assert state.cancel(job_id) == (JobStatus.cancelling, -1)


def test_set_final_stamps_finished_at_once(state: JobState) -> None:
    job_id = make_job(state, 1)
    first = state.stamp_finished(job_id)
    state.finish_documents(job_id, [("d0", "failed", '{"id": "d0", "error": "boom"}')])
    state.set_final(job_id, JobStatus.failed, error="boom")
    assert state.records(job_id) == {}
    job = state.get(job_id)
    assert (job.status, job.error, job.finished_at) == (JobStatus.failed, "boom", first)
    assert 0 < state.redis.ttl(f"{state.prefix}job:{job_id}") <= 3600
    with pytest.raises(ValueError, match="final"):
        state.set_final(job_id, JobStatus.running)


def test_set_final_stamps_finished_at_if_nothing_did(state: JobState) -> None:
    job_id = make_job(state, 1)
    before = utcnow()
    state.set_final(job_id, JobStatus.failed, error="could not queue")
    job = state.get(job_id)
    assert job.status == JobStatus.failed and before <= job.finished_at <= utcnow()


def test_inline_texts_live_with_the_job_until_it_is_final(state: JobState) -> None:
    texts = {"d0": "première ligne".encode(), "d1": b"second line"}
    job_id = make_job(state, 2, key="with-texts", texts=texts)
    assert state.texts(job_id, ["d1", "d0", "nope"]) == {"d1": texts["d1"], "d0": texts["d0"]}
    assert make_job(state, 2, key="with-texts", texts={"d0": b"another request"}) == job_id
    assert state.texts(job_id, ["d0"]) == {"d0": texts["d0"]}
    state.finish_documents(job_id, [("d0", "succeeded", ""), ("d1", "succeeded", "")])
    state.set_final(job_id, JobStatus.succeeded)
    assert state.texts(job_id, ["d0", "d1"]) == {}
    assert state.redis.exists(f"{state.prefix}job:{job_id}:texts") == 0


def test_idempotency_key_returns_the_first_job_per_tenant(state: JobState) -> None:
    first = make_job(state, 1, key="batch-7")
    assert make_job(state, 2, key="batch-7") == first
    assert state.idempotent_job_id("acme", "batch-7") == first
    assert make_job(state, 1, tenant="other", key="batch-7") != first
    assert state.get(first).counts.total == 1
    state.redis.delete(f"{state.prefix}job:{first}")
    assert make_job(state, 1, key="batch-7") != first


def test_listing_pages_newest_first_with_status_filter(state: JobState) -> None:
    ids = [make_job(state, 1, age_s=100 - i) for i in range(7)]
    make_job(state, 1, tenant="other")
    state.set_final(ids[2], JobStatus.succeeded)
    state.set_final(ids[5], JobStatus.succeeded)
    seen, cursor = [], None
    while True:
        page, cursor = state.list("acme", None, 3, cursor)
        seen += [job.id for job in page]
        if cursor is None:
            break
    assert seen == ids[::-1]
    done, cursor = state.list("acme", JobStatus.succeeded, 1, None)
    assert [job.id for job in done] == [ids[5]]
    done, cursor = state.list("acme", JobStatus.succeeded, 1, cursor)
    assert [job.id for job in done] == [ids[2]]
    assert state.list("acme", JobStatus.succeeded, 1, cursor) == ([], None)


def test_a_foreign_cursor_is_refused_naming_cursor(state: JobState) -> None:
    with pytest.raises(InvalidJobError) as caught:
        state.list("acme", None, 10, "not-a-cursor!")
    assert caught.value.field == "cursor"
