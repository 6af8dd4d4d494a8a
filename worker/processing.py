"""The per-document pipeline: read each document (a bad one becomes its error record), run the task over the
group in one pass, store one record per document, record outcomes in Redis, and assemble the job's files when
its last document ends."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

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
from worker.outputs import doc_record, doc_uri, write_doc_records, write_job_outputs
from worker.tasks import Document, Task, get_task

MAX_ATTEMPTS = 3
READ_THREADS = 16
KEPT_RECORD_CHARS = 4096


class DocumentReader:
    """Reads documents from storage, several objects at a time. Keeps the last multi-document object (a JSONL
    batch or the job's inline inputs) parsed, since a job's consecutive groups usually come from the same one."""

    def __init__(self, storage: Storage, max_bytes: int):
        self.storage = storage
        self.max_bytes = max_bytes
        self._cached: tuple[str, list] | None = None

    def read_many(self, refs: list[DocRef], texts: dict[str, bytes] | None = None) -> list[Document | DocumentError]:
        """The documents `refs` point to, in order; a DocumentError naming the document for each that cannot be
        read. `texts` holds the inline texts (by doc id) of the refs of kind "redis"."""
        held = texts or {}
        # Parse shared objects here, once, before the threads start; an unreadable one errs per document below.
        for ref in refs:
            if ref.kind in ("jsonl", "inline") and not ref.error:
                try:
                    self._entries(ref.uri, ref.kind)
                except DocumentError:
                    pass
        if len(refs) == 1:
            return [self._read_or_error(refs[0], held)]
        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(refs))) as pool:
            return list(pool.map(lambda ref: self._read_or_error(ref, held), refs))

    def _read_or_error(self, ref: DocRef, texts: dict[str, bytes]) -> Document | DocumentError:
        try:
            return self.read(ref, texts)
        except DocumentError as exc:
            exc.doc_id = ref.id
            return exc

    def read(self, ref: DocRef, texts: dict[str, bytes] | None = None) -> Document:
        """The document `ref` points to (for kind "redis", its text in `texts`); raises DocumentError naming it
        if it cannot be read."""
        if ref.error:
            raise DocumentError(ref.error, ref.id)
        if ref.kind == "jsonl":
            parsed = self._entries(ref.uri, "jsonl")[ref.entry]
            if isinstance(parsed, DocumentError):
                raise DocumentError(f"{ref.name}: {parsed}", ref.id)
            text = parsed[1]
        elif ref.kind == "redis":
            held = (texts or {}).get(ref.id)
            if held is None:
                raise DocumentError(f"{ref.name}: its inline text is no longer in Redis", ref.id)
            text = extract_text(ref.name, held, self.max_bytes)
        elif ref.kind == "inline":
            text = extract_text(ref.name, self._entries(ref.uri, "inline")[ref.entry], self.max_bytes)
        else:
            text = extract_text(ref.name, self._get(ref.uri, ref.name), self.max_bytes)
        return Document(id=ref.id, text=text, metadata={"name": ref.name, "uri": ref.uri})

    def _get(self, uri: str, name: str) -> bytes:
        try:
            return self.storage.get(uri)
        except ObjectNotFound:
            raise DocumentError(f"{name}: no object at {uri}") from None
        except AccessDenied as exc:
            raise DocumentError(f"{name}: {exc}") from None

    def _entries(self, uri: str, kind: str) -> list:
        cached = self._cached
        if cached is None or cached[0] != uri:
            data = self._get(uri, uri)
            if kind == "jsonl":
                entries = parse_jsonl(data, self.max_bytes)
            else:
                entries = [json.loads(line)["text"].encode("utf-8") for line in data.split(b"\n") if line]
            cached = self._cached = (uri, entries)
        return cached[1]


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


def process_refs(
    reader: DocumentReader,
    task: Task,
    options: BaseModel,
    refs: list[DocRef],
    soft_time_limit_s: int,
    texts: dict[str, bytes] | None = None,
) -> list[dict]:
    """Records of `refs` (with `texts`, the inline texts kept in Redis, by doc id): read errors, then the task's
    results and errors. If the soft time limit strikes during the pass, each of its documents gets a time-limit
    error."""
    records: list[dict] = []
    documents: list[Document] = []
    for ref, read in zip(refs, reader.read_many(refs, texts)):
        if isinstance(read, DocumentError):
            records.append(doc_record(ref.id, error=str(read), elapsed_s=0.0))
        else:
            documents.append(read)
    try:
        records += run_task(task, documents, options)
    except SoftTimeLimitExceeded:
        records += [
            doc_record(d.id, error=f"{d.metadata['name']}: time limit of {soft_time_limit_s} s exceeded",
                       elapsed_s=soft_time_limit_s)
            for d in documents
        ]
    return records


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
        refs = {ref.id: ref for ref in self.state.refs(job_id, doc_ids) if ref is not None}
        known = [doc_id for doc_id in doc_ids if doc_id in refs]
        if len(known) < len(doc_ids):
            log.warning("unknown documents", doc_ids=sorted(set(doc_ids) - set(known)))
        records: list[dict] = []
        recovered: list[tuple[str, str, str]] = []
        pending: list[DocRef] = []
        for doc_id, attempt in zip(known, self.state.begin_documents(job_id, known, MAX_ATTEMPTS)):
            ref = refs[doc_id]
            stored = self._stored_record(job.output_uri, doc_id) if attempt in ("retry", "exhausted") else None
            if stored is not None:
                recovered.append((doc_id, stored["status"], ""))
            elif attempt == "exhausted":
                log.error("giving up on document", doc_id=doc_id, attempts=MAX_ATTEMPTS)
                error = (f"{ref.name}: gave up after {MAX_ATTEMPTS} attempts; each lost its worker "
                         "(crash, out of memory or the hard time limit)")
                records.append(doc_record(doc_id, error=error, elapsed_s=0.0))
            elif attempt in ("first", "retry"):
                pending.append(ref)
        if recovered:
            self.state.finish_documents(job_id, recovered)
        if pending:
            task = get_task(job.task)
            options = validate_options(job.task, job.options)
            texts = self.state.texts(job_id, [ref.id for ref in pending if ref.kind == "redis"])
            records += process_refs(self.reader, task, options, pending, self.settings.task_soft_time_limit, texts)
        remaining = self._store(job.output_uri, job_id, records) if records else self.state.remaining(job_id)
        if remaining == 0:
            self.finalize(job_id)

    def _stored_record(self, job_uri: str, doc_id: str) -> dict | None:
        """The record an earlier attempt stored for the document, or None if it stored none."""
        try:
            return json.loads(self.storage.get(doc_uri(job_uri, doc_id)))
        except ObjectNotFound:
            return None

    def fail_documents(self, job_id: str, doc_ids: list[str], reason: str) -> None:
        """Record each of `doc_ids` that has no outcome yet as failed with `reason` (finalizing the job if these
        were its last documents)."""
        job = self.state.get(job_id)
        if job is None:
            return
        outcomes = self.state.outcomes(job_id, doc_ids)
        refs = [ref for ref in self.state.refs(job_id, doc_ids) if ref is not None and ref.id not in outcomes]
        if refs:
            records = [doc_record(ref.id, error=f"{ref.name}: {reason}", elapsed_s=0.0) for ref in refs]
            if self._store(job.output_uri, job_id, records) == 0:
                self.finalize(job_id)

    def _store(self, job_uri: str, job_id: str, records: list[dict]) -> int:
        """Write the records (all of them before any outcome is recorded, so a crash in between leaves records
        for the retry to find), then record the outcomes; returns the job's documents without an outcome."""
        write_doc_records(self.storage, job_uri, records)
        for record in records:
            get_logger(job_id=job_id, doc_id=record["id"]).info(
                "document " + record["status"], elapsed_s=record["elapsed_s"], error=record.get("error")
            )
        outcomes = []
        for record in records:
            encoded = json.dumps(record, ensure_ascii=False)
            outcomes.append((record["id"], record["status"], encoded if len(encoded) <= KEPT_RECORD_CHARS else ""))
        return self.state.finish_documents(job_id, outcomes)

    def finalize(self, job_id: str) -> JobStatus | None:
        """Write results.jsonl, errors.jsonl and manifest.json and set the final status, once every document
        has an outcome; running it again writes the same files. Returns the final status (None if not ready)."""
        job = self.state.get(job_id)
        if job is None or job.counts.unfinished > 0:
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
            self.state.records(job_id),
        )
        status = JobStatus(manifest["status"])
        self.state.set_final(job_id, status)
        get_logger(job_id=job_id).info("job finished", status=status.value, **manifest["counts"])
        return status

