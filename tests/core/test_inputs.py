"""Document references from requests and S3 prefixes, and packing under a token budget."""
from __future__ import annotations

import uuid

import pytest

from core.inputs import (
    DocRef,
    InvalidJobError,
    LimitExceededError,
    pack,
    refs_from_prefix,
    refs_from_request,
    storage_name,
)
from core.jobs import JobRequest
from core.storage import S3Storage

LIMITS = {"max_documents": 5, "max_document_bytes": 1000, "max_jsonl_bytes": 10_000, "max_redis_bytes": 100}


def ref(index: int, tokens: int) -> DocRef:
    return DocRef(index, f"d{index}", "object", f"s3://b/d{index}", f"d{index}.txt", tokens)


@pytest.mark.parametrize(
    ("tokens", "budget", "max_docs", "groups"),
    [
        ([10, 10, 10, 10], 25, 10, [[0, 1], [2, 3]]),
        ([10, 100, 10], 50, 10, [[0], [1], [2]]),
        ([1] * 5, 100, 2, [[0, 1], [2, 3], [4]]),
        ([30], 10, 4, [[0]]),
    ],
    ids=["fills-budget", "oversized-alone", "max-documents", "single-over-budget"],
)
def test_pack_groups_consecutive_documents_under_the_budget(tokens, budget, max_docs, groups) -> None:
    packed = pack([ref(i, t) for i, t in enumerate(tokens)], budget, max_docs)
    assert [[r.index for r in group] for group in packed] == groups


def test_small_inline_texts_stay_in_redis_with_their_ids() -> None:
    request = JobRequest(task="stats", documents=[{"text": "héllo wörld"}, {"id": "x/y", "uri": "s3://bkt/a/b.pdf"},
                                                  {"uri": "s3://bkt/c.md"}, {"id": "n", "text": "näin"}])
    inputs = refs_from_request(request, "s3://out/t/j1", None, **LIMITS)
    assert [(r.id, r.kind, r.name) for r in inputs.refs] == [
        ("doc-0", "redis", "doc-0.txt"), ("x/y", "object", "b.pdf"), ("c.md", "object", "c.md"), ("n", "redis", "n.txt")
    ]
    assert inputs.texts == {"doc-0": "héllo wörld".encode(), "n": "näin".encode()}
    assert inputs.objects == {}
    assert storage_name("x/y") == "x%2Fy"


@pytest.mark.parametrize("max_redis_bytes", [0, len("héllo wörld".encode()) + len("näin".encode()) - 1],
                         ids=["redis-off", "one-byte-over"])
def test_inline_texts_over_the_redis_limit_go_to_one_inputs_object(max_redis_bytes: int) -> None:
    request = JobRequest(task="stats", documents=[{"text": "héllo wörld"}, {"id": "x/y", "uri": "s3://bkt/a/b.pdf"},
                                                  {"id": "n", "text": "näin"}])
    inputs = refs_from_request(request, "s3://out/t/j1", None, **{**LIMITS, "max_redis_bytes": max_redis_bytes})
    uri = "s3://out/t/j1/inputs/documents.jsonl"
    assert [(r.id, r.kind, r.uri, r.entry) for r in inputs.refs] == [
        ("doc-0", "inline", uri, 0), ("x/y", "object", "s3://bkt/a/b.pdf", 0), ("n", "inline", uri, 1)
    ]
    assert inputs.texts == {}
    assert inputs.objects == {uri: '{"id": "doc-0", "text": "héllo wörld"}\n{"id": "n", "text": "näin"}\n'.encode()}


@pytest.mark.parametrize(
    ("documents", "field", "limit"),
    [
        ([{"text": "x" * 1001}], "documents[0].text", "document_too_large"),
        ([{"uri": "s3://bkt/a/r.txt"}, {"uri": "s3://bkt/b/r.txt"}], "documents[1].id", None),
        ([{"text": "x"}] * 6, "documents", "too_many_documents"),
    ],
    ids=["text-over-limit", "derived-ids-collide", "too-many-documents"],
)
def test_bad_documents_are_refused_naming_the_field(documents: list, field: str, limit: str | None) -> None:
    with pytest.raises(InvalidJobError) as caught:
        refs_from_request(JobRequest(task="stats", documents=documents), "s3://out/t/j", None, **LIMITS)
    assert caught.value.field == field
    # limits are their own kind of error (the API answers 413 for them, 422 for the rest)
    assert getattr(caught.value, "code", None) == limit
    assert isinstance(caught.value, LimitExceededError) == (limit is not None)


def test_a_prefix_becomes_one_ref_per_object_and_per_jsonl_entry(service_settings, test_bucket: str) -> None:
    storage = S3Storage(service_settings)
    base = f"s3://{test_bucket}/inputs-test/{uuid.uuid4().hex}"
    storage.put_many({
        f"{base}/a.txt": b"alpha " * 100,
        f"{base}/notes/b.html": b"<p>beta</p>",
        f"{base}/skip.bin": b"\x00\x01",
        f"{base}/batch.jsonl": b'{"id": "j1", "text": "one"}\n\nnot json\n{"id": "j1", "text": "two"}\n',
    })
    refs = refs_from_prefix(base + "/", storage, 10_000, 1000)
    assert [(r.id, r.kind, r.entry, r.error is not None) for r in refs] == [
        ("a.txt", "object", 0, False),
        ("j1", "jsonl", 0, False),
        ("batch.jsonl#2", "jsonl", 1, True),
        ("j1~2", "jsonl", 2, True),
        ("notes/b.html", "object", 0, False),
    ]
    assert "not valid JSON" in refs[2].error and "duplicate document id 'j1'" in refs[3].error
    assert refs[0].tokens == 150
    with pytest.raises(InvalidJobError, match="no documents") as caught:
        refs_from_prefix(base + "/empty/", storage, 10_000, 1000)
    assert caught.value.field == "input_uri"
    with pytest.raises(InvalidJobError, match="over the limit"):
        refs_from_prefix(base + "/", storage, 20, 1000)
