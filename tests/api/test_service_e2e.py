"""End to end over real HTTP: the API served by uvicorn (`docflash api`), a Celery worker subprocess, real Redis
and S3. Submit over REST -> the worker processes -> outputs in S3 -> fetched over REST."""
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

TEXTS = {
    "minutes": "The board met on Tuesday. It approved the budget. Two members abstained.",
    "memo": "Shipping resumes Monday.\n\nPlease update the customer portal before noon.",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def api_url(service_env, api_settings, tmp_path_factory) -> Iterator[str]:
    """`docflash api` on a free port, configured like the worker, with the test tenants' keys."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("api") / "api.log"
    env = {
        **os.environ,
        **service_env,
        "DOCFLASH_API_KEYS": json.dumps(api_settings.api_keys),
        "DOCFLASH_MAX_REQUEST_BYTES": str(api_settings.max_request_bytes),
    }
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "docflash"), "api", "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the API exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the API did not come up:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def wait_final(http: httpx.Client, job_id: str, headers: dict, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = http.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("succeeded", "partially_succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    pytest.fail(f"job {job_id} did not finish within {timeout}s: {job}")


def jsonl(data: bytes) -> dict[str, dict]:
    return {record["id"]: record for record in map(json.loads, data.decode().splitlines())}


def test_submit_process_and_fetch_over_http(api_url, celery_worker, auth):
    documents = [{"id": doc_id, "text": text} for doc_id, text in TEXTS.items()]
    documents.append({"id": "lost", "uri": "s3://docflash-test/e2e/no-such-file.txt"})
    body = {"task": "stats", "documents": documents}
    headers = {**auth["acme"], "Idempotency-Key": f"e2e-{time.time_ns()}"}

    with httpx.Client(base_url=api_url, timeout=10) as http:
        submitted = http.post("/v1/jobs", json=body, headers=headers)
        again = http.post("/v1/jobs", json=body, headers=headers)
        job = wait_final(http, submitted.json()["id"], auth["acme"])
        results = http.get(f"/v1/jobs/{job['id']}/results", headers=auth["acme"])
        errors = http.get(f"/v1/jobs/{job['id']}/errors", headers=auth["acme"])
        redirect = http.get(f"/v1/jobs/{job['id']}/results", params={"redirect": "true"}, headers=auth["acme"])
        presigned = httpx.get(redirect.headers["location"], timeout=10)
        foreign = http.get(f"/v1/jobs/{job['id']}/results", headers=auth["globex"])
        metrics = http.get("/metrics").text

    assert submitted.status_code == 202 and again.json()["id"] == submitted.json()["id"]
    assert job["status"] == "partially_succeeded"
    assert job["counts"] == {"total": 3, "succeeded": 2, "failed": 1, "running": 0, "queued": 0, "cancelled": 0}
    assert job["started_at"] and job["finished_at"]
    assert results.status_code == 200 and results.headers["content-type"].startswith("application/x-ndjson")
    by_id = jsonl(results.content)
    assert set(by_id) == set(TEXTS)
    assert by_id["minutes"]["result"]["sentences"] == 3 and by_id["memo"]["result"]["paragraphs"] == 2
    assert {doc_id: record["result"]["characters"] for doc_id, record in by_id.items()} == {
        doc_id: len(text) for doc_id, text in TEXTS.items()
    }
    assert list(jsonl(errors.content)) == ["lost"] and jsonl(errors.content)["lost"]["error"]
    assert redirect.status_code == 307 and presigned.status_code == 200
    assert presigned.content == results.content
    assert foreign.status_code == 404
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
    }
    assert samples[("docflash_job_duration_seconds_gcount", (("task", "stats"),))] >= 1
    assert samples[("docflash_jobs", (("status", "partially_succeeded"),))] >= 1


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_oversized_body_is_refused_over_http(api_url, api_settings, auth, framing):
    body = json.dumps({"task": "stats", "documents": [{"text": "z" * api_settings.max_request_bytes}]}).encode()
    content = body if framing == "content-length" else iter([body[i:i + 4096] for i in range(0, len(body), 4096)])

    response = httpx.post(
        f"{api_url}/v1/jobs", content=content, headers={**auth["acme"], "Content-Type": "application/json"}, timeout=10
    )

    assert response.status_code == 413
    assert "max_request_bytes" in response.json()["error"]["message"]
