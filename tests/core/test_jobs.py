"""The job request model: bad requests are refused with errors that name the field."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.jobs import FINAL_STATUSES, JobRequest, JobStatus


def error_locations(exc: ValidationError) -> list[str]:
    return [".".join(map(str, error["loc"])) + ": " + error["msg"] for error in exc.errors()]


def test_a_valid_request_keeps_its_fields() -> None:
    request = JobRequest(
        task="summarize",
        options={"sentences": 3},
        documents=[{"id": "a", "text": "Some text."}, {"uri": "s3://bucket-1/docs/b.pdf"}],
        priority=4,
        metadata={"team": "search"},
    )
    assert [d.id for d in request.documents] == ["a", None]
    assert request.priority == 4


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"task": "stats"}, "", "exactly one of 'documents' or 'input_uri'"),
        ({"task": "stats", "documents": [{"text": "x"}], "input_uri": "s3://bkt/in/"}, "", "exactly one"),
        ({"task": "stats", "documents": []}, "documents", "at least one"),
        ({"task": "stats", "documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "documents",
         "documents[1].id 'a' repeats documents[0].id"),
        ({"task": "stats", "documents": [{"text": "x", "uri": "s3://bkt/a.txt"}]}, "documents.0",
         "exactly one of 'text'"),
        ({"task": "stats", "documents": [{"uri": "http://example.com/a.txt"}]}, "documents.0.uri", "s3://"),
        ({"task": "stats", "documents": [{"uri": "s3://bkt/"}]}, "documents.0.uri", "must name an object"),
        ({"task": "stats", "documents": [{"uri": "s3://bkt/a/../b.txt"}]}, "documents.0.uri", "'..'"),
        ({"task": "stats", "documents": [{"id": "a\x00b", "text": "x"}]}, "documents.0.id", "control characters"),
        ({"task": "stats", "input_uri": "s3://Bad_Bucket/x"}, "input_uri", "bucket name"),
        ({"task": "stats", "documents": [{"text": "x"}], "priority": 10}, "priority", "less than or equal to 9"),
        ({"task": "stats", "documents": [{"text": "x"}], "colour": "red"}, "colour", "Extra inputs"),
        ({"task": "", "documents": [{"text": "x"}]}, "task", "at least 1 character"),
    ],
    ids=["no-documents-or-input", "both-sources", "empty-documents", "duplicate-id", "text-and-uri",
         "uri-not-s3", "uri-without-key", "uri-dotdot", "id-control-char", "bad-bucket", "priority-range",
         "unknown-field", "empty-task"],
)
def test_bad_requests_name_the_field(body: dict, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobRequest.model_validate(body)
    assert any(loc.startswith(field) and message in loc for loc in error_locations(caught.value)), error_locations(
        caught.value
    )


def test_final_statuses() -> None:
    assert {s.value for s in JobStatus if s.is_final} == {"succeeded", "partially_succeeded", "failed", "cancelled"}
    assert FINAL_STATUSES == {s for s in JobStatus if s.is_final}
    assert not JobStatus.cancelling.is_final
