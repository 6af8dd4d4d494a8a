"""JobService: the one place that submits, reads, lists and cancels jobs (used by the API, the CLI and the S3
watcher). Storage layout per job: `{output_uri}/{tenant}/{job_id}/` holding `inputs/` (inline texts over
`redis_inputs_max_bytes`; smaller ones stay in Redis with the job), `docs/{doc_id}.json`, `results.jsonl`,
`errors.jsonl` and `manifest.json`."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Literal

from pydantic import ValidationError
from redis import Redis

from core.broker import TaskSender
from core.inputs import InvalidJobError, pack, refs_from_request
from core.jobs import Counts, Job, JobRequest, JobStatus
from core.logging import get_logger
from core.settings import Settings
from core.state import JobState, utcnow
from core.storage import AccessDenied, ObjectNotFound, S3Storage, Storage, join_uri
from core.task_specs import UnknownTaskError, options_error, validate_options

__all__ = ["InvalidJobError", "JobService", "OUTPUT_FILES", "job_state_from_settings"]

OUTPUT_FILES = {"results": "results.jsonl", "errors": "errors.jsonl", "manifest": "manifest.json"}
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def job_state_from_settings(settings: Settings) -> JobState:
    """The Redis job state for `settings`."""
    return JobState(Redis.from_url(settings.redis_url), settings.redis_prefix, settings.job_ttl_s)


def check_tenant(tenant: str) -> str:
    """Validate a tenant name (it becomes a storage path segment)."""
    if not _TENANT.match(tenant) or ".." in tenant:
        raise ValueError(f"tenant {tenant!r} must be 1-63 letters, digits, '_', '.' or '-'")
    return tenant


class JobService:
    """Submits jobs (documents stored, refs in Redis, tasks queued) and reads them back per tenant."""

    def __init__(self, settings: Settings, state: JobState, storage: Storage, sender: TaskSender):
        self.settings = settings
        self.state = state
        self.storage = storage
        self.sender = sender

    @classmethod
    def from_settings(cls, settings: Settings) -> JobService:
        """A service wired to the Redis, S3 and broker that `settings` name."""
        return cls(settings, job_state_from_settings(settings), S3Storage(settings), TaskSender(settings))

    def submit(self, request: JobRequest, tenant: str) -> Job:
        """Create and queue a job. The same idempotency key from the same tenant returns the same job.

        Raises InvalidJobError(field, message) for input that cannot become a job."""
        check_tenant(tenant)
        try:
            options = validate_options(request.task, request.options).model_dump(mode="json", by_alias=True)
        except UnknownTaskError as exc:
            raise InvalidJobError("task", str(exc)) from None
        except ValidationError as exc:
            raise InvalidJobError(*options_error(exc)) from None
        self._check_model(request.model)
        self._check_sources(request, tenant)
        if request.idempotency_key:
            existing = self.state.idempotent_job_id(tenant, request.idempotency_key)
            if existing and (job := self.state.get(existing)) is not None:
                return job
        if request.output_uri:
            self._check_output(request.output_uri)
        job_id = uuid.uuid4().hex
        job_uri = join_uri(request.output_uri or self.settings.output_uri, tenant, job_id)
        inputs = refs_from_request(
            request,
            job_uri,
            self.storage,
            max_documents=self.settings.max_documents_per_job,
            max_document_bytes=self.settings.max_document_bytes,
            max_jsonl_bytes=self.settings.max_request_bytes,
            max_redis_bytes=self.settings.redis_inputs_max_bytes,
        )
        refs = inputs.refs
        self.storage.put_many(inputs.objects, "application/x-ndjson")
        job = Job(
            id=job_id,
            tenant=tenant,
            task=request.task,
            model=request.model,
            options=options,
            status=JobStatus.queued,
            counts=Counts(total=len(refs), queued=len(refs)),
            created_at=utcnow(),
            output_uri=job_uri,
            priority=request.priority,
            metadata=request.metadata,
        )
        holder = self.state.create(job, refs, request.idempotency_key, inputs.texts)
        if holder != job_id:
            return self.state.get(holder) or job
        log = get_logger(job_id=job_id, tenant=tenant, task=job.task)
        try:
            for group in pack(refs, self.settings.pack_token_budget, self.settings.max_documents_per_task):
                self.sender.process_documents(job_id, [ref.id for ref in group], request.priority)
        except Exception as exc:
            log.exception("queueing failed")
            self.state.set_final(job_id, JobStatus.failed, error=f"could not queue the job: {exc}")
            raise
        log.info("job submitted", documents=len(refs))
        return job

    def _check_model(self, model: str | None) -> None:
        """Refuse a job that asks for an LLM other than the one the workers run (one model per GPU worker)."""
        name = self.settings.served_model or self.settings.llm_model
        if model is None or model == name:
            return
        served = repr(name) if name else "no named LLM (DOCFLASH_SERVED_MODEL and DOCFLASH_LLM_MODEL are unset)"
        raise InvalidJobError(
            "model", f"this service runs {served}, not {model!r}: leave model out or ask for that one"
        )

    def _check_sources(self, request: JobRequest, tenant: str) -> None:
        """Refuse inputs that would read the job files of other tenants (the service's output area)."""
        area = self.settings.output_uri + "/"
        own = f"{area}{tenant}/"
        sources = [(f"documents[{i}].uri", d.uri) for i, d in enumerate(request.documents or []) if d.uri]
        if request.input_uri:
            sources.append(("input_uri", request.input_uri))
        for field, uri in sources:
            if (uri.startswith(area) or area.startswith(uri)) and not uri.startswith(own):
                raise InvalidJobError(field, "may not read the job files of other tenants")

    def _check_output(self, output_uri: str) -> None:
        """Refuse an output location whose bucket the service cannot reach."""
        try:
            self.storage.check_bucket(output_uri)
        except (ObjectNotFound, AccessDenied) as exc:
            raise InvalidJobError("output_uri", f"cannot write to {output_uri}: {exc}") from None

    def get(self, tenant: str, job_id: str) -> Job | None:
        """The tenant's job, or None (also for another tenant's job)."""
        job = self.state.get(job_id)
        return job if job is not None and job.tenant == tenant else None

    def list(
        self, tenant: str, status: JobStatus | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[Job], str | None]:
        """A page of the tenant's jobs, newest first, and the cursor of the next page (None at the end)."""
        if not 1 <= limit <= 1000:
            raise InvalidJobError("limit", "must be between 1 and 1000")
        return self.state.list(tenant, status, limit, cursor)

    def cancel(self, tenant: str, job_id: str) -> Job | None:
        """Cancel the tenant's job: documents not started are skipped, results so far are kept, the final status
        is `cancelled`. A finished job is returned unchanged. None if there is no such job."""
        if self.get(tenant, job_id) is None:
            return None
        previous, remaining = self.state.cancel(job_id)
        if previous is not None and not previous.is_final and remaining == 0:
            self.sender.finalize_job(job_id)
        get_logger(job_id=job_id, tenant=tenant).info("job cancel requested", previous=str(previous))
        return self.state.get(job_id)

    @staticmethod
    def _output_uri(job: Job, name: Literal["results", "errors", "manifest"]) -> str | None:
        if name not in OUTPUT_FILES:
            raise ValueError(f"name must be one of {sorted(OUTPUT_FILES)}, got {name!r}")
        return join_uri(job.output_uri, OUTPUT_FILES[name]) if job.status.is_final else None

    def open_output(self, job: Job, name: Literal["results", "errors", "manifest"]) -> Iterator[bytes] | None:
        """The results/errors JSONL (or manifest) of a job from `get` in chunks; None if the job is not finished or
        the file is missing. Taking the job, not its id, spares a second read of its state."""
        uri = self._output_uri(job, name)
        if uri is None:
            return None
        try:
            return self.storage.stream(uri)
        except ObjectNotFound:
            return None

    def presigned_output_url(self, job: Job, name: Literal["results", "errors", "manifest"]) -> str | None:
        """A time-limited download URL of an output file of a job from `get`; None if the job is not finished or
        the file is missing."""
        uri = self._output_uri(job, name)
        if uri is None or not self.storage.exists(uri):
            return None
        return self.storage.presigned_url(uri, self.settings.presign_expiry_s)
