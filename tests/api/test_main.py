"""The app as a whole: its OpenAPI schema, and that serving it never imports torch or transformers."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.anyio


async def test_openapi_schema_documents_v1_and_bearer_auth(client):
    schema = (await client.get("/openapi.json")).json()

    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/results",
            "/v1/jobs/{job_id}/errors", "/healthz", "/readyz", "/metrics"} <= set(schema["paths"])
    submit = schema["paths"]["/v1/jobs"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobRequest")
    assert {"202", "401", "413", "422"} <= set(submit["responses"])
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert submit["security"] == [{"HTTPBearer": []}]


_NO_TORCH = """
import json, sys, httpx, asyncio
from api.main import app

async def main():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://docflash.test") as http:
        body = {"task": "summarize", "options": {"sentences": 2}, "documents": [{"text": "A. B. C."}]}
        submitted = await http.post("/v1/jobs", json=body, headers={"Authorization": "Bearer " + sys.argv[1]})
        listed = await http.get("/v1/jobs", headers={"Authorization": "Bearer " + sys.argv[1]})
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
    print(json.dumps({"status": [submitted.status_code, listed.status_code], "heavy": heavy}))

asyncio.run(main())
"""


def test_serving_requests_never_imports_torch_or_transformers(api_settings, service_env):
    env = {**os.environ, **service_env, "DOCFLASH_API_KEYS": json.dumps(api_settings.api_keys),
           "DOCFLASH_GPU_QUEUE": api_settings.gpu_queue}

    result = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, "acme-key-7f3c9a"], env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"status": [202, 200], "heavy": []}
