"""API fixtures: the app over the session's real Redis and S3, two tenants with API keys, an httpx client
speaking to the app in process (ASGI transport). The app queues to a queue of its own that no worker serves, so
jobs submitted here stay queued."""
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from redis import Redis

from api.auth import hash_api_key
from api.main import create_app
from core.queues import queue_list_names
from core.settings import Settings

API_KEYS = {"acme": "acme-key-7f3c9a", "globex": "globex-key-2b81de"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def auth() -> dict[str, dict[str, str]]:
    """Tenant -> the Authorization header of its API key."""
    return {tenant: {"Authorization": f"Bearer {key}"} for tenant, key in API_KEYS.items()}


@pytest.fixture(scope="session")
def api_settings(service_settings: Settings, redis_url: str) -> Iterator[Settings]:
    """The test service's settings with both tenants' key hashes, small limits and an unserved queue."""
    settings = service_settings.model_copy(
        update={
            "api_keys": [f"{tenant}:{hash_api_key(key)}" for tenant, key in API_KEYS.items()],
            "max_request_bytes": 64 * 1024,
            "max_documents_per_job": 20,
            "max_document_bytes": 8 * 1024,
            "gpu_queue": f"docflash.test.api-unserved.{uuid.uuid4().hex[:8]}",
        }
    )
    yield settings
    Redis.from_url(redis_url).delete(*queue_list_names(settings.gpu_queue))


@pytest.fixture(scope="session")
def api_app(api_settings: Settings) -> FastAPI:
    """The API app over the test Redis and S3."""
    return create_app(api_settings)


@pytest.fixture
async def client(api_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of the in-process app."""
    transport = httpx.ASGITransport(app=api_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://docflash.test") as http:
        yield http
