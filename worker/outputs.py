"""The files a job writes (same formats in the service and the local mode):
  docs/{doc_id}.json  one record per document: {"id", "status": "succeeded"|"failed", "result"|"error", "elapsed_s"}
  results.jsonl       {"id", "result"} per succeeded document, in request order
  errors.jsonl        {"id", "error"} per failed document, in request order
  manifest.json       job, task, options, status, counts, timings and file locations
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from core.inputs import DocRef, storage_name
from core.jobs import Counts, JobStatus
from core.service import OUTPUT_FILES
from core.storage import Storage, join_uri

JSON_TYPE = "application/json"
JSONL_TYPE = "application/x-ndjson"


def doc_uri(job_uri: str, doc_id: str) -> str:
    """Where a document's record is stored (deterministic, so a redelivered task overwrites, never duplicates)."""
    return join_uri(job_uri, "docs", storage_name(doc_id) + ".json")


def doc_record(doc_id: str, *, result: dict | None = None, error: str | None = None, elapsed_s: float) -> dict:
    """A document's record: its result, or its error message."""
    if (result is None) == (error is None):
        raise ValueError("give exactly one of result or error")
    outcome: dict[str, Any] = {"result": result} if error is None else {"error": error}
    return {"id": doc_id, "status": "succeeded" if error is None else "failed", **outcome, "elapsed_s": elapsed_s}


def write_doc_records(storage: Storage, job_uri: str, records: list[dict]) -> None:
    """Store documents' records, several at a time."""
    storage.put_many(
        {doc_uri(job_uri, record["id"]): json.dumps(record, ensure_ascii=False).encode() for record in records},
        JSON_TYPE,
    )


def final_status(counts: Counts) -> JobStatus:
    """cancelled if any document was skipped by a cancel; else succeeded, failed or partially_succeeded."""
    if counts.cancelled:
        return JobStatus.cancelled
    if counts.failed == 0:
        return JobStatus.succeeded
    if counts.succeeded == 0:
        return JobStatus.failed
    return JobStatus.partially_succeeded


def write_job_outputs(
    storage: Storage,
    job_uri: str,
    refs: list[DocRef],
    outcomes: dict[str, str],
    job_fields: dict[str, Any],
    started_at: datetime | None,
    finished_at: datetime,
    known_records: dict[str, dict],
) -> dict[str, Any]:
    """Assemble results.jsonl and errors.jsonl from the per-document records (`known_records`, the rest read
    from docs/) and write them with manifest.json. The records are the stored ones, so running it twice writes
    the same files. Returns the manifest."""
    finished = [ref.id for ref in refs if outcomes.get(ref.id) in ("succeeded", "failed")]
    missing = [doc_id for doc_id in finished if doc_id not in known_records]
    with ThreadPoolExecutor(max_workers=16) as pool:
        read = dict(zip(missing, pool.map(lambda doc_id: json.loads(storage.get(doc_uri(job_uri, doc_id))), missing)))
    records = [known_records.get(doc_id) or read[doc_id] for doc_id in finished]
    results, errors = [], []
    for record in records:
        if record["status"] == "succeeded":
            results.append(json.dumps({"id": record["id"], "result": record["result"]}, ensure_ascii=False))
        else:
            errors.append(json.dumps({"id": record["id"], "error": record["error"]}, ensure_ascii=False))
    counts = Counts(
        total=len(refs),
        succeeded=len(results),
        failed=len(errors),
        cancelled=sum(1 for ref in refs if outcomes.get(ref.id) == "cancelled"),
    )
    files = {name: join_uri(job_uri, filename) for name, filename in OUTPUT_FILES.items()}
    processing_s = sum(record["elapsed_s"] for record in records)
    manifest = {
        **job_fields,
        "status": final_status(counts).value,
        "counts": counts.model_dump(exclude={"running", "queued"}),
        "started_at": started_at.isoformat() if started_at else None,
        "finished_at": finished_at.isoformat(),
        "timings": {
            "wall_s": round((finished_at - started_at).total_seconds(), 3) if started_at else 0.0,
            "processing_s": round(processing_s, 3),
            "mean_document_s": round(processing_s / len(records), 4) if records else 0.0,
        },
        "files": {**files, "docs": join_uri(job_uri, "docs") + "/"},
    }
    storage.put(files["results"], "".join(line + "\n" for line in results).encode(), JSONL_TYPE)
    storage.put(files["errors"], "".join(line + "\n" for line in errors).encode(), JSONL_TYPE)
    storage.put(files["manifest"], json.dumps(manifest, indent=2, ensure_ascii=False).encode(), JSON_TYPE)
    return manifest
