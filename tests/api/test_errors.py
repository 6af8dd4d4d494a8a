"""The common error body: field paths, framework errors, and 503 for a dependency that does not answer."""
import httpx
import pytest

from api.errors import field_path
from api.main import create_app

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "loc, path",
    [
        pytest.param(("task",), "task", id="top-level"),
        pytest.param(("documents", 3, "text"), "documents[3].text", id="list-item-field"),
        pytest.param(("options", "labels", 0), "options.labels[0]", id="nested-list"),
        pytest.param((), "", id="whole-body"),
    ],
)
def test_field_path_reads_like_the_request(loc, path):
    assert field_path(loc) == path


@pytest.mark.parametrize(
    "method, path, status, code",
    [
        pytest.param("GET", "/v2/jobs", 404, "not_found", id="unknown-path"),
        pytest.param("DELETE", "/v1/jobs", 405, "method_not_allowed", id="wrong-method"),
    ],
)
async def test_framework_errors_use_the_common_body(client, method, path, status, code):
    response = await client.request(method, path)

    assert response.status_code == status
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize(
    "method, path",
    [
        pytest.param("POST", "/v1/jobs", id="submit"),
        pytest.param("GET", "/v1/jobs/0123", id="get"),
        pytest.param("GET", "/v1/jobs", id="list"),
    ],
)
async def test_requests_are_503_while_redis_is_down(api_settings, auth, method, path):
    app = create_app(api_settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"}))
    body = {"task": "stats", "documents": [{"uri": "s3://docflash-test/in/a.txt"}]} if method == "POST" else None

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://docflash.test") as http:
        response = await http.request(method, path, json=body, headers=auth["acme"])

    assert response.status_code == 503, response.text
    assert response.json()["error"] == {"code": "unavailable", "message": "redis is unavailable; try again later"}
    assert response.headers["retry-after"] == "5"
