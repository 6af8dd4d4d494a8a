"""/healthz and /readyz against the real Redis and S3, and against ones that are down."""
import httpx
import pytest

from api.main import create_app

pytestmark = pytest.mark.anyio


async def get(app, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://docflash.test") as http:
        return await http.get(path)


async def test_healthz_needs_no_key(client):
    response = await client.get("/healthz")

    assert response.status_code == 200
    assert response.json()["status"] == "ok"


async def test_readyz_is_ready_when_redis_and_s3_answer(client):
    response = await client.get("/readyz")

    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checks": {"redis": "ok", "s3": "ok"}}


@pytest.mark.parametrize(
    "down, update",
    [
        pytest.param(["redis"], {"redis_url": "redis://127.0.0.1:1/0"}, id="redis-down"),
        pytest.param(["s3"], {"output_uri": "s3://docflash-missing-bucket/jobs"}, id="bucket-missing"),
        pytest.param(
            ["redis", "s3"], {"redis_url": "redis://127.0.0.1:1/0", "s3_endpoint_url": "http://127.0.0.1:1"},
            id="both-down",
        ),
    ],
)
async def test_readyz_is_503_naming_what_is_down(api_settings, down, update):
    app = create_app(api_settings.model_copy(update=update))

    response = await get(app, "/readyz")

    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "not_ready"
    assert error["message"].startswith(f"{', '.join(down)} unreachable")

