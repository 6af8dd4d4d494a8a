"""The per-document pipeline: read each document (a bad one becomes its error record), run the task over the
group in one pass, store one record per document, record outcomes in Redis, and assemble the job's files when
its last document ends."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from billiard.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel

from core.documents import DocumentError, extract_text, parse_jsonl
from core.inputs import DocRef
from core.jobs import JobStatus
from core.logging import get_logger
from core.settings import Settings
from core.state import JobState
from core.storage import AccessDenied, ObjectNotFound, Storage
from core.task_specs import validate_options
from worker.outputs import doc_record, doc_uri, write_doc_record, write_job_outputs
from worker.tasks import Document, Task, get_task

MAX_ATTEMPTS = 3


@dataclass
class DocumentReader:
    """Reads documents from storage; keeps the last JSONL object parsed, since a job's consecutive groups
    usually come from the same one."""

    storage: Storage
    max_bytes: int
    _jsonl_uri: str | None = None
    _jsonl_entries: list = field(default_factory=list)

    def read(self, ref: DocRef) -> Document:
        """The document `ref` points to; raises DocumentError naming it if it cannot be read."""
        if ref.error:
            raise DocumentError(ref.error, ref.id)
        if ref.kind == "jsonl":
            parsed = self._jsonl(ref.uri)[ref.entry]
            if isinstance(parsed, DocumentError):
                raise DocumentError(f"{ref.name}: {parsed}", ref.id)
            text = parsed[1]
        else:
            try:
                data = self.storage.get(ref.uri)
            except ObjectNotFound:
                raise DocumentError(f"{ref.name}: no object at {ref.uri}", ref.id) from None
            except AccessDenied as exc:
                raise DocumentError(f"{ref.name}: {exc}", ref.id) from None
            text = extract_text(ref.name, data, self.max_bytes)
        return Document(id=ref.id, text=text, metadata={"name": ref.name, "uri": ref.uri})

    def _jsonl(self, uri: str) -> list:
        if uri != self._jsonl_uri:
            try:
                data = self.storage.get(uri)
            except (ObjectNotFound, AccessDenied) as exc:
                raise DocumentError(f"cannot read {uri}: {exc}") from None
            self._jsonl_entries = parse_jsonl(data, self.max_bytes)
            self._jsonl_uri = uri
        return self._jsonl_entries


def run_task(task: Task, documents: list[Document], options: BaseModel) -> list[dict]:
    """Run `task` over `documents` in one pass and return one record per document. A document the task fails
    on gets an error record; if the pass as a whole fails, each document is retried alone so one bad
    document does not fail the others."""
    if not documents:
        return []
    log = get_logger(task=task.name)
    started = time.perf_counter()
    try:
        outputs: list = task.process_batch(documents, options)
    except (SoftTimeLimitExceeded, MemoryError):
        raise
    except Exception as exc:
        if len(documents) == 1:
            log.exception("task failed", doc_id=documents[0].id)
            outputs = [DocumentError(f"{documents[0].metadata.get('name', documents[0].id)}: task failed: {exc}")]
        else:
            log.warning("batch failed; retrying its documents one by one", error=str(exc))
            return [record for document in documents for record in run_task(task, [document], options)]
    if len(outputs) != len(documents):
        raise RuntimeError(f"task {task.name} returned {len(outputs)} results for {len(documents)} documents")
    share = round((time.perf_counter() - started) / len(documents), 6)
    return [
        doc_record(document.id, error=str(output), elapsed_s=share)
        if isinstance(output, DocumentError)
        else doc_record(document.id, result=output, elapsed_s=share)
        for document, output in zip(documents, outputs)
    ]


class JobProcessor:
    """Runs the Celery tasks' work against Redis state and object storage."""

    def __init__(self, settings: Settings, state: JobState, storage: Storage):
        self.settings = settings
        self.state = state
        self.storage = storage
        self.reader = DocumentReader(storage, settings.max_document_bytes)

    def process(self, job_id: str, doc_ids: list[str]) -> None:
        """Process one group of a job's documents, skipping those already done, cancelled or stored."""
        job = self.state.get(job_id)
        log = get_logger(job_id=job_id)
        if job is None:
            log.warning("job not found; dropping its documents", documents=len(doc_ids))
            return
        remaining: int | None = None
        pending: list[DocRef] = []
        for ref, doc_id in zip(self.state.refs(job_id, doc_ids), doc_ids):
            if ref is None:
                log.warning("unknown document", doc_id=doc_id)
                continue
            attempt = self.state.begin_document(job_id, doc_id, MAX_ATTEMPTS)
            if attempt == "retry" and self.storage.exists(doc_uri(job.output_uri, doc_id)):
                stored = json.loads(self.storage.get(doc_uri(job.output_uri, doc_id)))
                remaining = self.state.finish_document(job_id, doc_id, stored["status"])
            elif attempt == "exhausted":
                log.error("giving up on document", doc_id=doc_id, attempts=MAX_ATTEMPTS)
                remaining = self._store(job.output_uri, job_id, doc_record(
                    doc_id, error=f"{ref.name}: gave up after {MAX_ATTEMPTS} attempts; each lost its worker "
                    "(crash, out of memory or the hard time limit)", elapsed_s=0.0))
            elif attempt in ("first", "retry"):
                pending.append(ref)
        if pending:
            remaining = self._run(job.task, job.options, job.output_uri, job_id, pending)
        if remaining is None:
            remaining = self.state.remaining(job_id)
        if remaining == 0:
            self.finalize(job_id)

    def _run(self, task_name: str, options: dict, job_uri: str, job_id: str, refs: list[DocRef]) -> int:
        documents: list[Document] = []
        remaining = -1
        for ref in refs:
            try:
                documents.append(self.reader.read(ref))
            except DocumentError as exc:
                remaining = self._store(job_uri, job_id, doc_record(ref.id, error=str(exc), elapsed_s=0.0))
        done: set[str] = set()
        try:
            for record in run_task(get_task(task_name), documents, validate_options(task_name, options)):
                remaining = self._store(job_uri, job_id, record)
                done.add(record["id"])
        except SoftTimeLimitExceeded:
            limit = self.settings.task_soft_time_limit
            for document in documents:
                if document.id not in done:
                    error = f"{document.metadata['name']}: time limit of {limit} s exceeded"
                    remaining = self._store(job_uri, job_id, doc_record(document.id, error=error, elapsed_s=limit))
        return remaining

    def _store(self, job_uri: str, job_id: str, record: dict) -> int:
        write_doc_record(self.storage, job_uri, record)
        get_logger(job_id=job_id, doc_id=record["id"]).info(
            "document " + record["status"], elapsed_s=record["elapsed_s"], error=record.get("error")
        )
        return self.state.finish_document(job_id, record["id"], record["status"])

    def finalize(self, job_id: str) -> JobStatus | None:
        """Write results.jsonl, errors.jsonl and manifest.json and set the final status, once every document
        has an outcome; running it again writes the same files. Returns the final status (None if not ready)."""
        job = self.state.get(job_id)
        if job is None or self.state.remaining(job_id) > 0:
            return None
        finished_at = self.state.stamp_finished(job_id)
        job_fields = {
            "job_id": job.id,
            "tenant": job.tenant,
            "task": job.task,
            "options": job.options,
            "created_at": job.created_at.isoformat(),
        }
        manifest = write_job_outputs(
            self.storage,
            job.output_uri,
            self.state.all_refs(job_id),
            self.state.outcomes(job_id),
            job_fields,
            job.started_at or job.created_at,
            finished_at,
        )
        status = JobStatus(manifest["status"])
        self.state.set_final(job_id, status)
        get_logger(job_id=job_id).info("job finished", status=status.value, **manifest["counts"])
        return status

