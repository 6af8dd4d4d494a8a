"""Liveness (`/healthz`) and readiness (`/readyz`: Redis and S3 answer) probes."""
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import ServiceDep
from api.errors import error_response
from api.schemas import ErrorBody, Health
from core.storage import S3Storage

PROBE_TIMEOUT_S = 2.0

router = APIRouter(tags=["health"])
_probes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="readyz")


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Health:
    """The process is up and serving requests."""
    return Health(status="ok")


def _failures(probes: dict[str, Callable[[], object]]) -> dict[str, str]:
    """Run the probes at once; name -> what went wrong, for each that failed or took over PROBE_TIMEOUT_S."""
    futures = {name: _probes.submit(probe) for name, probe in probes.items()}
    failures = {}
    for name, future in futures.items():
        try:
            future.result(timeout=PROBE_TIMEOUT_S)
        except FutureTimeout:
            failures[name] = f"no answer within {PROBE_TIMEOUT_S:g} s"
        except Exception as exc:
            failures[name] = f"{type(exc).__name__}: {exc}"
    return failures


@router.get(
    "/readyz",
    response_model=Health,
    responses={503: {"model": ErrorBody, "description": "a dependency is down; the message names it"}},
    summary="Readiness",
)
def readyz(service: ServiceDep) -> JSONResponse | Health:
    """Redis (job state and queue) and the S3 output bucket both answer."""
    probes: dict[str, Callable[[], object]] = {"redis": service.state.redis.ping}
    storage = service.storage
    if isinstance(storage, S3Storage):
        probes["s3"] = lambda: storage.check_bucket(service.settings.output_uri)
    failures = _failures(probes)
    if failures:
        details = "; ".join(f"{name}: {reason}" for name, reason in failures.items())
        return error_response(503, "not_ready", f"{', '.join(failures)} unreachable ({details})")
    return Health(status="ready", checks={name: "ok" for name in probes})
