"""The request size limit (max_request_bytes = 64 KiB in these tests), applied to the raw body before parsing."""
import json

import pytest

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}


def job_of_size(total_bytes: int, documents: int = 16) -> bytes:
    """A stats job of `documents` texts whose JSON body is exactly `total_bytes` long."""
    docs = [{"id": f"d{i}", "text": ""} for i in range(documents)]
    base = len(json.dumps({"task": "stats", "documents": docs}).encode())
    per_document, rest = divmod(total_bytes - base, documents)
    for i, doc in enumerate(docs):
        doc["text"] = "y" * (per_document + (1 if i < rest else 0))
    body = json.dumps({"task": "stats", "documents": docs}).encode()
    assert len(body) == total_bytes
    return body


@pytest.mark.parametrize(
    "extra, status", [pytest.param(0, 202, id="at-the-limit"), pytest.param(1, 413, id="one-byte-over")]
)
async def test_limit_is_inclusive(client, auth, api_settings, extra, status):
    body = job_of_size(api_settings.max_request_bytes + extra)

    response = await client.post("/v1/jobs", content=body, headers={**auth["acme"], **JSON})

    assert response.status_code == status, response.text
    if status == 202:
        assert response.json()["counts"]["total"] == 16


async def test_oversized_body_is_413_even_when_it_is_not_json(client, auth, api_settings):
    body = b"{" * (api_settings.max_request_bytes + 1)

    response = await client.post("/v1/jobs", content=body, headers={**auth["acme"], **JSON})

    assert response.status_code == 413
    assert response.json()["error"] == {
        "code": "payload_too_large",
        "message": f"the request body exceeds max_request_bytes ({api_settings.max_request_bytes} bytes)",
    }


async def test_oversized_chunked_body_without_content_length_is_413(client, auth, api_settings):
    body = job_of_size(api_settings.max_request_bytes + 1000)

    async def chunks():
        for start in range(0, len(body), 1024):
            yield body[start:start + 1024]

    response = await client.post("/v1/jobs", content=chunks(), headers={**auth["acme"], **JSON})

    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert "max_request_bytes" in response.json()["error"]["message"]


async def test_get_requests_are_not_held_back(client, auth):
    response = await client.get("/v1/jobs", params={"limit": 1}, headers=auth["acme"])

    assert response.status_code == 200
