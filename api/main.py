"""The docflash REST API: `create_app()` builds it, `app` is the instance that uvicorn serves."""
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from api import metrics
from api.auth import parse_api_keys
from api.body_limit import BodySizeLimitMiddleware
from api.errors import install_error_handlers
from api.routes import health, jobs
from core.logging import configure_logging, get_logger
from core.service import JobService
from core.settings import Settings, get_settings

DESCRIPTION = """Batch processing of long documents on GPUs.

Submit a job (`POST /v1/jobs`), poll it (`GET /v1/jobs/{id}`) until its status is final, then fetch
`/v1/jobs/{id}/results` and `/v1/jobs/{id}/errors` (JSONL, one line per document). Every request needs
`Authorization: Bearer <API key>`; each key belongs to one tenant, which sees only its own jobs. Errors answer
`{"error": {"code", "message", "field"}}`."""


def create_app(settings: Settings | None = None, service: JobService | None = None) -> FastAPI:
    """Build the API for `settings` (default: from the environment) over `service` (default: from settings)."""
    settings = settings or get_settings()
    configure_logging(settings)
    service = service or JobService.from_settings(settings)
    app = FastAPI(title="docflash", version="1", description=DESCRIPTION)
    app.state.settings = settings
    app.state.service = service
    app.state.api_keys = parse_api_keys(settings.api_keys)
    if not app.state.api_keys:
        get_logger().warning("no API keys configured (DOCFLASH_API_KEYS): every /v1 request will be refused")
    registry = CollectorRegistry()
    registry.register(metrics.ServiceCollector(service.state, settings.gpu_queue, settings.metrics_window_s))
    app.state.metrics_registry = registry
    install_error_handlers(app)
    app.include_router(jobs.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(metrics.RequestMetricsMiddleware, metrics=metrics.RequestMetrics(registry))
    return app


app = create_app()
