"""Each LLM task end to end: JobService -> Redis broker -> a real `docflash worker` process with the tiny
Llama -> per-document records and results in S3."""
import json
import uuid

import pytest

from core.jobs import JobRequest, JobStatus
from core.service import JobService

pytestmark = pytest.mark.slow

TEXT = ("The storage engine appends every change to the log before it touches the data file. On restart it "
        "replays the log from the last checkpoint. ") * 3
TOO_LONG = "word " * 600
SCHEMA = {"type": "object", "properties": {"engine": {"type": "string"}}, "required": ["engine"]}

JOBS = [
    ("summarize", {"method": "abstractive", "max_new_tokens": 8}, "summary"),
    ("classify", {"labels": ["storage", "cooking"]}, "label"),
    ("score", {"chunk_tokens": 16}, "perplexity"),
    ("embed", {"model": "llm", "chunk_tokens": 32}, "embedding"),
]


@pytest.fixture
def llm_service(service_settings, worker_factory, tiny_llama):
    """A JobService and a worker process, on a queue of their own, with the tiny Llama as the LLM."""
    queue = f"docflash.test.llm.{uuid.uuid4().hex[:8]}"
    worker_factory({"DOCFLASH_GPU_QUEUE": queue, "DOCFLASH_LLM_MODEL": str(tiny_llama)})
    return JobService.from_settings(service_settings.model_copy(update={"gpu_queue": queue}))


def finished(service: JobService, job_id: str, wait_for):
    return wait_for(lambda: (job := service.get("acme", job_id)) is not None and job.status.is_final and job,
                    120, f"job {job_id} to finish")


def read_jsonl(service: JobService, job_id: str, name: str) -> list[dict]:
    job = service.get("acme", job_id)
    return [json.loads(line) for line in b"".join(service.open_output(job, name)).splitlines()]


def test_llm_tasks_through_the_worker(llm_service, wait_for):
    jobs = {
        task: llm_service.submit(JobRequest(task=task, options=options, documents=[
            {"id": "report", "text": TEXT}, {"id": "huge", "text": TOO_LONG},
        ]), "acme")
        for task, options, _ in JOBS
    }
    extract = llm_service.submit(JobRequest(task="extract", options={"schema": SCHEMA, "max_new_tokens": 8},
                                            documents=[{"id": "report", "text": TEXT}]), "acme")
    for task, _, key in JOBS:
        final = finished(llm_service, jobs[task].id, wait_for)
        [result] = [record for record in read_jsonl(llm_service, final.id, "results") if record["id"] == "report"]
        assert key in result["result"], task
        assert result["result"]["usage"]["attention_impl"] == "sdpa" and result["result"]["usage"]["input_tokens"] > 50
        if task == "embed":
            assert final.status == JobStatus.succeeded  # long documents are embedded chunk by chunk
        else:
            assert final.status == JobStatus.partially_succeeded, task
            [error] = read_jsonl(llm_service, final.id, "errors")
            assert error["id"] == "huge" and "context" in error["error"], task
    final = finished(llm_service, extract.id, wait_for)
    assert final.status == JobStatus.failed  # random weights never write the schema's JSON
    [error] = read_jsonl(llm_service, final.id, "errors")
    assert "not valid JSON for the schema after 2 attempts" in error["error"]
