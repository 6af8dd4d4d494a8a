"""/v1/jobs over real Redis and S3, without a worker: submitting, reading, listing, cancelling, and each kind of
bad input answered with the common error body."""
import uuid

import httpx
import pytest

from core.service import job_state_from_settings

pytestmark = pytest.mark.anyio

TEXTS = [
    "The river rose after three days of rain. Farmers moved their cattle to the hills.",
    "Quarterly revenue grew by 12 percent. Operating costs fell as the new plant came online.",
]


def job_body(texts=TEXTS, **extra) -> dict:
    return {"task": "stats", "documents": [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)], **extra}


def assert_error(response: httpx.Response, status: int, code: str, field: str | None = None, says: str = ""):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error.get("field") == field
    assert says in error["message"]


async def test_submit_answers_202_and_keeps_small_inline_texts_with_the_job(client, auth, s3, api_settings):
    response = await client.post("/v1/jobs", json=job_body(metadata={"batch": "b1"}), headers=auth["acme"])

    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["tenant"] == "acme" and job["task"] == "stats" and job["status"] == "queued"
    assert job["counts"] == {"total": 2, "succeeded": 0, "failed": 0, "running": 0, "queued": 2, "cancelled": 0}
    assert job["output_uri"] == f"{api_settings.output_uri}/acme/{job['id']}"
    assert job["metadata"] == {"batch": "b1"}
    kept = job_state_from_settings(api_settings).texts(job["id"], ["d0", "d1"])
    assert kept == {f"d{i}": text.encode() for i, text in enumerate(TEXTS)}
    assert s3.list_objects_v2(Bucket="docflash-test", Prefix=f"jobs/acme/{job['id']}/")["KeyCount"] == 0


async def test_get_returns_the_submitted_job(client, auth):
    submitted = (await client.post("/v1/jobs", json=job_body(), headers=auth["acme"])).json()

    response = await client.get(f"/v1/jobs/{submitted['id']}", headers=auth["acme"])

    assert response.status_code == 200
    assert response.json() == submitted


@pytest.mark.parametrize("where", ["header", "body"])
async def test_same_idempotency_key_returns_the_same_job(client, auth, where):
    key = f"upload-{uuid.uuid4().hex}"
    extra, headers = ({}, {"Idempotency-Key": key}) if where == "header" else ({"idempotency_key": key}, {})

    first = await client.post("/v1/jobs", json=job_body(**extra), headers={**auth["acme"], **headers})
    second = await client.post("/v1/jobs", json=job_body(**extra), headers={**auth["acme"], **headers})
    other_tenant = await client.post("/v1/jobs", json=job_body(**extra), headers={**auth["globex"], **headers})

    assert first.status_code == second.status_code == 202
    assert second.json()["id"] == first.json()["id"]
    assert other_tenant.json()["id"] != first.json()["id"]


async def test_list_pages_newest_first_and_filters_by_status(client, auth):
    ids = [(await client.post("/v1/jobs", json=job_body(), headers=auth["globex"])).json()["id"] for _ in range(3)]
    await client.post(f"/v1/jobs/{ids[1]}/cancel", headers=auth["globex"])

    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/jobs", params=params, headers=auth["globex"])).json()
        assert len(page["jobs"]) <= 2
        seen += [job["id"] for job in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    cancelling = (await client.get("/v1/jobs", params={"status": "cancelling"}, headers=auth["globex"])).json()
    queued = (await client.get("/v1/jobs", params={"status": "queued"}, headers=auth["globex"])).json()

    assert len(seen) == len(set(seen))
    assert [job_id for job_id in seen if job_id in ids] == ids[::-1]
    assert ids[1] in {job["id"] for job in cancelling["jobs"]}
    assert {job["status"] for job in cancelling["jobs"]} == {"cancelling"}
    assert ids[1] not in {job["id"] for job in queued["jobs"]} and ids[0] in {job["id"] for job in queued["jobs"]}


async def test_cancel_skips_documents_not_started(client, auth):
    job_id = (await client.post("/v1/jobs", json=job_body(), headers=auth["acme"])).json()["id"]

    response = await client.post(f"/v1/jobs/{job_id}/cancel", headers=auth["acme"])

    assert response.status_code == 200
    assert response.json()["status"] == "cancelling"
    assert response.json()["counts"]["cancelled"] == 2 and response.json()["counts"]["queued"] == 0


@pytest.mark.parametrize("name", ["results", "errors"])
async def test_outputs_of_an_unfinished_job_are_409(client, auth, name):
    job_id = (await client.post("/v1/jobs", json=job_body(), headers=auth["acme"])).json()["id"]

    response = await client.get(f"/v1/jobs/{job_id}/{name}", headers=auth["acme"])

    assert_error(response, 409, "job_not_finished", says="queued")


@pytest.mark.parametrize(
    "method, path",
    [
        pytest.param("GET", "/v1/jobs/{id}", id="get"),
        pytest.param("POST", "/v1/jobs/{id}/cancel", id="cancel"),
        pytest.param("GET", "/v1/jobs/{id}/results", id="results"),
        pytest.param("GET", "/v1/jobs/{id}/errors?redirect=true", id="errors-redirect"),
    ],
)
async def test_another_tenants_job_is_404(client, auth, method, path):
    job_id = (await client.post("/v1/jobs", json=job_body(), headers=auth["acme"])).json()["id"]

    response = await client.request(method, path.format(id=job_id), headers=auth["globex"])
    unknown = await client.request(method, path.format(id=uuid.uuid4().hex), headers=auth["globex"])

    assert_error(response, 404, "job_not_found", "job_id", says=job_id)
    assert_error(unknown, 404, "job_not_found", "job_id")
    assert (await client.get(f"/v1/jobs/{job_id}", headers=auth["acme"])).json()["status"] == "queued"


@pytest.mark.parametrize(
    "method, path",
    [
        pytest.param("POST", "/v1/jobs", id="submit"),
        pytest.param("GET", "/v1/jobs", id="list"),
        pytest.param("GET", "/v1/jobs/0123", id="get"),
        pytest.param("POST", "/v1/jobs/0123/cancel", id="cancel"),
        pytest.param("GET", "/v1/jobs/0123/results", id="results"),
    ],
)
@pytest.mark.parametrize(
    "header",
    [
        pytest.param({}, id="no-key"),
        pytest.param({"Authorization": "Bearer acme-key-7f3c9b"}, id="wrong-key"),
        pytest.param({"Authorization": "Basic YWNtZTphY21l"}, id="basic-auth"),
    ],
)
async def test_missing_or_wrong_key_is_401_with_challenge(client, method, path, header):
    response = await client.request(method, path, json=job_body() if method == "POST" else None, headers=header)

    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")


def documents(count: int, size: int = 100, first: int = 0) -> list[dict]:
    return [{"id": f"doc-{i}", "text": ("lorem ipsum " * size)[:size]} for i in range(first, first + count)]


@pytest.mark.parametrize(
    "body, status, code, field, says",
    [
        pytest.param({"task": "translate", "documents": documents(1)}, 422, "invalid_request", "task",
                     "translate", id="unknown-task"),
        pytest.param({"task": "summarize", "options": {"sentences": 0}, "documents": documents(1)}, 422,
                     "invalid_request", "options.sentences", "", id="bad-option-value"),
        pytest.param({"task": "stats", "options": {"colour": "red"}, "documents": documents(1)}, 422,
                     "invalid_request", "options.colour", "", id="unknown-option"),
        pytest.param({"task": "stats", "documents": documents(1), "bogus": 1}, 422, "invalid_request", "bogus",
                     "", id="unknown-field"),
        pytest.param({"task": "extract", "options": {"schema": {"type": "object", "properties": {
                         "name": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}, "documents": documents(1)},
                     422, "invalid_request", "options.schema", "anyOf", id="extract-schema-unsupported"),
        pytest.param({"task": "stats"}, 422, "invalid_request", None, "documents", id="no-documents"),
        pytest.param({"task": "stats", "documents": []}, 422, "invalid_request", "documents", "",
                     id="empty-documents"),
        pytest.param({"task": "stats", "documents": [{"id": "a", "uri": "http://example.com/a.txt"}]}, 422,
                     "invalid_request", "documents[0].uri", "s3://", id="document-uri-not-s3"),
        pytest.param({"task": "stats", "documents": [{"id": "a"}]}, 422, "invalid_request", "documents[0]",
                     "text", id="document-without-text"),
        pytest.param({"task": "stats", "documents": documents(1), "priority": 12}, 422, "invalid_request",
                     "priority", "", id="priority-out-of-range"),
        pytest.param({"task": "stats", "documents": documents(21)}, 413, "too_many_documents", "documents",
                     "max_documents_per_job (20)", id="too-many-documents"),
        pytest.param({"task": "stats", "documents": documents(3) + documents(1, 9000, first=3)}, 413,
                     "document_too_large", "documents[3].text", "max_document_bytes", id="document-too-large"),
    ],
)
async def test_bad_job_request_names_the_field(client, auth, body, status, code, field, says):
    response = await client.post("/v1/jobs", json=body, headers=auth["acme"])

    assert_error(response, status, code, field, says)


@pytest.mark.parametrize(
    "content, content_type, says",
    [
        pytest.param(b'{"task": "stats", "documents": [', "application/json", "not valid JSON", id="truncated"),
        pytest.param(b"{'task': 'stats'}", "application/json", "not valid JSON", id="single-quotes"),
        pytest.param(b"", "application/json", "body is required", id="empty-body"),
        pytest.param(b'["stats"]', "application/json", "", id="array-not-object"),
        pytest.param(b"task=stats", "application/x-www-form-urlencoded", "", id="form-encoded"),
        pytest.param("{\"task\": \"st\xe4ts\"}".encode("latin-1"), "application/json", "UTF-8", id="not-utf8"),
    ],
)
async def test_malformed_body_is_422_not_500(client, auth, content, content_type, says):
    response = await client.post("/v1/jobs", content=content, headers={**auth["acme"], "Content-Type": content_type})

    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] in ("invalid_json", "invalid_request")
    assert says in response.json()["error"]["message"]


async def test_idempotency_header_and_body_must_agree(client, auth):
    response = await client.post(
        "/v1/jobs", json=job_body(idempotency_key="one"), headers={**auth["acme"], "Idempotency-Key": "two"}
    )

    assert_error(response, 422, "invalid_request", "idempotency_key")


@pytest.mark.parametrize(
    "params, field",
    [
        pytest.param({"limit": 0}, "limit", id="limit-zero"),
        pytest.param({"limit": "many"}, "limit", id="limit-not-a-number"),
        pytest.param({"status": "sleeping"}, "status", id="unknown-status"),
        pytest.param({"cursor": "not-a-cursor"}, "cursor", id="foreign-cursor"),
    ],
)
async def test_bad_list_parameters_name_the_field(client, auth, params, field):
    response = await client.get("/v1/jobs", params=params, headers=auth["acme"])

    assert_error(response, 422, "invalid_request", field)
