"""The job model: what a client submits (JobRequest) and what the service reports back (Job)."""
from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DOCUMENT_ID_MAX = 200
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


class JobStatus(StrEnum):
    """Lifecycle of a job; the last four are final."""

    queued = "queued"
    running = "running"
    cancelling = "cancelling"
    succeeded = "succeeded"
    partially_succeeded = "partially_succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def is_final(self) -> bool:
        """True once the job will not change any more."""
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {JobStatus.succeeded, JobStatus.partially_succeeded, JobStatus.failed, JobStatus.cancelled}
)


class Counts(BaseModel):
    """Documents of a job by state; `cancelled` counts documents skipped after a cancel."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    running: int = 0
    queued: int = 0
    cancelled: int = 0

    @property
    def unfinished(self) -> int:
        """Documents without an outcome yet (running or queued)."""
        return self.total - self.succeeded - self.failed - self.cancelled


def check_s3_uri(value: str, *, object_key: bool) -> str:
    """Validate an `s3://bucket/key` URI (`object_key`: a key is required) and return it."""
    if not value.startswith("s3://"):
        raise ValueError("must be an s3:// URI")
    bucket, _, key = value[len("s3://"):].partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
        raise ValueError(f"bucket name {bucket!r} is not a valid S3 bucket name")
    if object_key and not key:
        raise ValueError("must name an object: s3://bucket/key")
    if _CONTROL_CHARS.search(key) or any(part == ".." for part in key.split("/")):
        raise ValueError("key must not contain '..' segments or control characters")
    return value


def check_document_id(value: str) -> str:
    """Validate a document id: 1..200 printable characters, not only dots."""
    if not value or len(value) > DOCUMENT_ID_MAX:
        raise ValueError(f"must be 1..{DOCUMENT_ID_MAX} characters")
    if _CONTROL_CHARS.search(value):
        raise ValueError("must not contain control characters")
    if set(value) == {"."}:
        raise ValueError("must not consist of dots only")
    return value


class DocumentInput(BaseModel):
    """One document of a request: inline `text`, or a `uri` (s3://bucket/key) read by the worker."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    text: str | None = None
    uri: str | None = None

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str | None) -> str | None:
        return None if value is None else check_document_id(value)

    @field_validator("uri")
    @classmethod
    def _check_uri(cls, value: str | None) -> str | None:
        return None if value is None else check_s3_uri(value, object_key=True)

    @model_validator(mode="after")
    def _text_or_uri(self) -> DocumentInput:
        if (self.text is None) == (self.uri is None):
            raise ValueError("give exactly one of 'text' or 'uri'")
        return self


class JobRequest(BaseModel):
    """A job submission: a task with options over inline/URI documents or an S3 `input_uri`."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=64)
    model: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    documents: list[DocumentInput] | None = None
    input_uri: str | None = None
    output_uri: str | None = None
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    priority: int = Field(0, ge=0, le=9, description="0 runs first (the default); 9 runs last")
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("input_uri")
    @classmethod
    def _check_input_uri(cls, value: str | None) -> str | None:
        return None if value is None else check_s3_uri(value, object_key=False)

    @field_validator("output_uri")
    @classmethod
    def _check_output_uri(cls, value: str | None) -> str | None:
        return None if value is None else check_s3_uri(value, object_key=False).rstrip("/")

    @field_validator("documents")
    @classmethod
    def _check_documents(cls, documents: list[DocumentInput] | None) -> list[DocumentInput] | None:
        if documents is None:
            return None
        if not documents:
            raise ValueError("must hold at least one document")
        seen: dict[str, int] = {}
        for index, document in enumerate(documents):
            if document.id is None:
                continue
            if document.id in seen:
                raise ValueError(f"documents[{index}].id {document.id!r} repeats documents[{seen[document.id]}].id")
            seen[document.id] = index
        return documents

    @model_validator(mode="after")
    def _documents_or_input_uri(self) -> JobRequest:
        if (self.documents is None) == (self.input_uri is None):
            raise ValueError("give exactly one of 'documents' or 'input_uri'")
        return self


class Job(BaseModel):
    """A job as the service reports it."""

    id: str
    tenant: str
    task: str
    model: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    status: JobStatus
    counts: Counts
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    output_uri: str
    priority: int = 0
    metadata: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
