"""Local mode: run a task over a folder of documents in this process, with files on the local filesystem and
no Redis or S3; writes OUT/results.jsonl, errors.jsonl, manifest.json (and docs/) in the service's formats."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tqdm import tqdm

from core.inputs import InvalidJobError, pack, refs_from_prefix
from core.settings import Settings
from core.state import utcnow
from core.storage import LocalStorage, file_uri
from core.task_specs import options_error, validate_options
from worker.outputs import write_doc_records, write_job_outputs
from worker.processing import DocumentReader, process_refs
from worker.tasks import get_task


def run_local(
    input_dir: Path, task: str, out_dir: Path, options: dict[str, Any], settings: Settings, progress: bool = True
) -> dict[str, Any]:
    """Run `task` with `options` over every document under `input_dir` (JSONL files: one document per line)
    and write the job's files to `out_dir`. Returns the manifest. Raises ValueError naming the argument for a
    missing folder, a folder without documents, an unknown task or bad options."""
    if not input_dir.is_dir():
        raise ValueError(f"input folder {str(input_dir)!r} does not exist or is not a folder")
    try:
        parsed = validate_options(task, options)
    except ValidationError as exc:
        field, message = options_error(exc)
        raise ValueError(f"{field}: {message}") from None
    for module in settings.extra_task_modules:
        importlib.import_module(module)
    storage = LocalStorage()
    try:
        refs = refs_from_prefix(
            file_uri(input_dir), storage, settings.max_request_bytes, settings.max_document_bytes
        )
    except InvalidJobError as exc:
        raise ValueError(f"input folder {str(input_dir)!r}: {exc.message}") from None
    job_uri = file_uri(out_dir)
    reader = DocumentReader(storage, settings.max_document_bytes)
    runner = get_task(task)
    started = utcnow()
    records: dict[str, dict] = {}
    with tqdm(total=len(refs), unit="doc", desc=task, disable=not progress) as bar:
        for group in pack(refs, settings.pack_token_budget, settings.max_documents_per_task):
            done = process_refs(reader, runner, parsed, group, settings.task_soft_time_limit)
            write_doc_records(storage, job_uri, done)
            records.update((record["id"], record) for record in done)
            bar.update(len(group))
    job_fields = {
        "job_id": None,
        "tenant": None,
        "task": task,
        "options": parsed.model_dump(mode="json", by_alias=True),
        "created_at": started.isoformat(),
        "input": str(input_dir),
    }
    outcomes = {doc_id: record["status"] for doc_id, record in records.items()}
    return write_job_outputs(storage, job_uri, refs, outcomes, job_fields, started, utcnow(), records)
