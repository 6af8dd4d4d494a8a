"""Turning a job request's documents into document references (what the worker reads, by id) and packing them
into GPU passes under a token budget. Texts are never queued: a job's inline texts are kept in Redis with its state
when small, else stored in one object under the job's `inputs/`."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import PurePosixPath
from urllib.parse import quote

from core.documents import JSONL_SUFFIX, SUPPORTED_SUFFIXES, DocumentError, parse_jsonl
from core.jobs import JobRequest
from core.storage import AccessDenied, ObjectNotFound, Storage, join_uri

CHARS_PER_TOKEN = 4
INLINE_INPUTS = "documents.jsonl"


class InvalidJobError(ValueError):
    """Bad input that only shows when the job is submitted; `field` names the request field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class LimitExceededError(InvalidJobError):
    """A job over a per-job size limit; `code` says which (`too_many_documents`, `document_too_large`)."""

    def __init__(self, field: str, message: str, code: str):
        super().__init__(field, message)
        self.code = code


@dataclass(frozen=True)
class DocRef:
    """Where one document of a job comes from.

    kind "object": a file at `uri`;
    kind "jsonl": entry number `entry` (0-based, blank lines skipped) of a client's JSONL object at `uri`;
    kind "redis": the request's inline text, kept in Redis with the job state until the job is final;
    kind "inline": line `entry` of the job's own `inputs/documents.jsonl` (inline texts too large for Redis);
    `error` set: the document is already known to be bad and only gets its error line.
    """

    index: int
    id: str
    kind: str
    uri: str
    name: str
    tokens: int
    entry: int = 0
    error: str | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DocRef:
        """The inverse of `to_dict`."""
        return cls(**data)


def storage_name(doc_id: str) -> str:
    """A document id as one safe path segment (percent-encoded), used for docs/ and inputs/ keys."""
    return quote(doc_id, safe="-_.~")


def estimate_tokens(size: int) -> int:
    """A cheap token estimate from a size in characters or bytes."""
    return max(1, size // CHARS_PER_TOKEN)


def is_document_name(name: str) -> bool:
    """Whether `name`'s suffix is a document type the worker reads (or a JSONL batch)."""
    suffix = PurePosixPath(name).suffix.lower()
    return suffix in SUPPORTED_SUFFIXES or suffix == JSONL_SUFFIX


@dataclass(frozen=True)
class JobInputs:
    """A request's document refs and where its inline texts go: `objects` (URI -> bytes) to store before the
    job is created, or `texts` (doc id -> UTF-8 text) to keep in Redis with the job state."""

    refs: list[DocRef]
    objects: dict[str, bytes] = field(default_factory=dict)
    texts: dict[str, bytes] = field(default_factory=dict)


def refs_from_request(
    request: JobRequest,
    job_uri: str,
    storage: Storage,
    *,
    max_documents: int,
    max_document_bytes: int,
    max_jsonl_bytes: int,
    max_redis_bytes: int,
) -> JobInputs:
    """The document references of `request` and its inline texts: kept in Redis if they come to at most
    `max_redis_bytes` in all, else in one JSONL object under the job's `inputs/`.

    Raises InvalidJobError naming the field for input that cannot become a job.
    """
    if request.documents is not None:
        inputs = _refs_from_documents(request, job_uri, max_document_bytes, max_redis_bytes)
        field_name = "documents"
    else:
        refs = refs_from_prefix(request.input_uri or "", storage, max_jsonl_bytes, max_document_bytes)
        inputs, field_name = JobInputs(refs), "input_uri"
    if len(inputs.refs) > max_documents:
        raise LimitExceededError(
            field_name, f"{len(inputs.refs)} documents exceed max_documents_per_job ({max_documents})",
            "too_many_documents",
        )
    return inputs


def _refs_from_documents(
    request: JobRequest, job_uri: str, max_document_bytes: int, max_redis_bytes: int
) -> JobInputs:
    """Refs of the request's documents, with the inline texts in Redis (small) or in S3 (large)."""
    texts: dict[str, bytes] = {}
    refs: list[DocRef] = []
    seen: dict[str, int] = {}
    for index, document in enumerate(request.documents or []):
        if document.text is not None:
            doc_id = document.id or f"doc-{index}"
            encoded = document.text.encode("utf-8")
            if len(encoded) > max_document_bytes:
                raise LimitExceededError(
                    f"documents[{index}].text",
                    f"{len(encoded)} bytes exceed max_document_bytes ({max_document_bytes} bytes)",
                    "document_too_large",
                )
            ref = DocRef(index, doc_id, "redis", "", f"{doc_id}.txt", estimate_tokens(len(document.text)),
                         entry=len(texts))
            texts[doc_id] = encoded
        else:
            name = PurePosixPath(document.uri or "").name
            doc_id = document.id or name
            ref = DocRef(index, doc_id, "object", document.uri or "", name, estimate_tokens(max_document_bytes))
        if doc_id in seen:
            raise InvalidJobError(
                f"documents[{index}].id", f"{doc_id!r} repeats documents[{seen[doc_id]}]; give each document an id"
            )
        seen[doc_id] = index
        refs.append(ref)
    if sum(map(len, texts.values())) <= max_redis_bytes:
        return JobInputs(refs, texts=texts)
    inputs_uri = join_uri(job_uri, "inputs", INLINE_INPUTS)
    lines = [json.dumps({"id": doc_id, "text": text.decode("utf-8")}, ensure_ascii=False)
             for doc_id, text in texts.items()]
    stored = [replace(ref, kind="inline", uri=inputs_uri) if ref.kind == "redis" else ref for ref in refs]
    return JobInputs(stored, objects={inputs_uri: "".join(line + "\n" for line in lines).encode("utf-8")})


def refs_from_prefix(
    input_uri: str, storage: Storage, max_jsonl_bytes: int, max_document_bytes: int
) -> list[DocRef]:
    """One ref per supported object under `input_uri` (an S3 or file:// prefix, or one object), one per entry
    of each JSONL object. Raises InvalidJobError("input_uri", ...) if there are none."""
    try:
        objects = [info for info in storage.list(input_uri) if is_document_name(info.relative_key or info.uri)]
    except (ObjectNotFound, AccessDenied) as exc:
        raise InvalidJobError("input_uri", f"cannot list {input_uri}: {exc}") from None
    if not objects:
        raise InvalidJobError("input_uri", f"no documents ({', '.join(SUPPORTED_SUFFIXES)}, .jsonl) at {input_uri}")
    refs: list[DocRef] = []
    seen: set[str] = set()
    for info in objects:
        key = info.relative_key or PurePosixPath(info.uri).name
        if not key.lower().endswith(JSONL_SUFFIX):
            refs.append(DocRef(len(refs), _unique(key, seen), "object", info.uri, key, estimate_tokens(info.size)))
            continue
        if info.size > max_jsonl_bytes:
            raise InvalidJobError("input_uri", f"{info.uri} is {info.size} bytes, over the limit of {max_jsonl_bytes}")
        try:
            entries = parse_jsonl(storage.get(info.uri), max_document_bytes)
        except (ObjectNotFound, AccessDenied) as exc:
            raise InvalidJobError("input_uri", f"cannot read {info.uri}: {exc}") from None
        refs.extend(_jsonl_refs(info.uri, key, entries, seen, first_index=len(refs)))
    return refs


def _jsonl_refs(
    uri: str, key: str, entries: list[tuple[str, str] | DocumentError], seen: set[str], first_index: int
) -> Iterable[DocRef]:
    for entry, parsed in enumerate(entries):
        index = first_index + entry
        if isinstance(parsed, DocumentError):
            doc_id = _unique(parsed.doc_id or f"{key}#{entry + 1}", seen)
            yield DocRef(index, doc_id, "jsonl", uri, key, 1, entry, error=f"{key}: {parsed}")
        else:
            doc_id, text = parsed
            yield DocRef(index, _unique(doc_id, seen), "jsonl", uri, key, estimate_tokens(len(text)), entry)


def _unique(doc_id: str, seen: set[str]) -> str:
    candidate, n = doc_id, 1
    while candidate in seen:
        n += 1
        candidate = f"{doc_id}~{n}"
    seen.add(candidate)
    return candidate


def pack(refs: list[DocRef], token_budget: int, max_documents: int) -> list[list[DocRef]]:
    """Consecutive refs grouped so each group's estimated tokens stay within `token_budget` (a document over
    the budget gets a group of its own) and no group has more than `max_documents`."""
    groups: list[list[DocRef]] = []
    current: list[DocRef] = []
    tokens = 0
    for ref in refs:
        if current and (tokens + ref.tokens > token_budget or len(current) >= max_documents):
            groups.append(current)
            current, tokens = [], 0
        current.append(ref)
        tokens += ref.tokens
    if current:
        groups.append(current)
    return groups
