"""/v1/jobs: submit, read, list and cancel jobs, and fetch their results and errors."""
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from pydantic import BaseModel

from api.deps import ServiceDep, TenantDep
from api.errors import ApiError
from api.schemas import ErrorBody, JobPage
from core.inputs import InvalidJobError, LimitExceededError
from core.jobs import Job, JobRequest, JobStatus
from core.service import JobService

_ERRORS = {
    401: {"model": ErrorBody, "description": "missing or invalid API key"},
    404: {"model": ErrorBody, "description": "no such job for this tenant"},
    422: {"model": ErrorBody, "description": "invalid input; `field` names it"},
}
router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses={401: _ERRORS[401]})


def _json(model: BaseModel, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """`model` as a JSON response, serialized once here: returning the model would make FastAPI validate it
    again and serialize it on another thread hop."""
    return Response(model.model_dump_json(), status_code=status_code, media_type="application/json", headers=headers)


def _invalid(exc: InvalidJobError) -> ApiError:
    return ApiError(422, "invalid_request", str(exc), field=exc.field)


def _not_found(job_id: str) -> ApiError:
    return ApiError(404, "job_not_found", f"no job {job_id!r}", field="job_id")


@router.post(
    "",
    status_code=202,
    response_model=Job,
    responses={413: {"model": ErrorBody, "description": "over a size limit"}, 422: _ERRORS[422]},
    summary="Submit a job",
)
def submit_job(
    request: JobRequest,
    tenant: TenantDep,
    service: ServiceDep,
    idempotency_key: Annotated[
        str | None, Header(description="same as the body's `idempotency_key`; the same key returns the same job")
    ] = None,
) -> Response:
    """Queue `task` over inline documents, document URIs or everything under `input_uri`. Answers 202 with the
    job; poll `GET /v1/jobs/{id}` until its status is final."""
    if idempotency_key is not None:
        if request.idempotency_key is not None and request.idempotency_key != idempotency_key:
            raise ApiError(
                422,
                "invalid_request",
                "the Idempotency-Key header and the body's idempotency_key differ",
                field="idempotency_key",
            )
        request = request.model_copy(update={"idempotency_key": idempotency_key})
    try:
        job = service.submit(request, tenant)
    except LimitExceededError as exc:
        raise ApiError(413, exc.code, str(exc), field=exc.field) from None
    except InvalidJobError as exc:
        raise _invalid(exc) from None
    return _json(job, 202, {"Location": f"/v1/jobs/{job.id}"})


@router.get("", response_model=JobPage, responses={422: _ERRORS[422]}, summary="List jobs")
def list_jobs(
    tenant: TenantDep,
    service: ServiceDep,
    status: Annotated[JobStatus | None, Query(description="only jobs in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="jobs per page")] = 50,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
) -> Response:
    """The tenant's jobs, newest first, a page at a time."""
    try:
        jobs, next_cursor = service.list(tenant, status=status, limit=limit, cursor=cursor)
    except InvalidJobError as exc:
        raise _invalid(exc) from None
    return _json(JobPage(jobs=jobs, next_cursor=next_cursor))


@router.get("/{job_id}", response_model=Job, responses={404: _ERRORS[404]}, summary="Get a job")
def get_job(job_id: str, tenant: TenantDep, service: ServiceDep) -> Response:
    """The job's status, document counts, timestamps and output location."""
    job = service.get(tenant, job_id)
    if job is None:
        raise _not_found(job_id)
    return _json(job)


@router.post("/{job_id}/cancel", response_model=Job, responses={404: _ERRORS[404]}, summary="Cancel a job")
def cancel_job(job_id: str, tenant: TenantDep, service: ServiceDep) -> Response:
    """Skip the job's documents that have not started; results so far are kept and the job ends `cancelled`.
    A finished job is returned unchanged."""
    job = service.cancel(tenant, job_id)
    if job is None:
        raise _not_found(job_id)
    return _json(job)


def _output(
    job_id: str, name: Literal["results", "errors"], redirect: bool, tenant: str, service: JobService
) -> Response:
    """Stream the finished job's `name` file, or redirect to a presigned URL of it."""
    job = service.get(tenant, job_id)
    if job is None:
        raise _not_found(job_id)
    if not job.status.is_final:
        raise ApiError(
            409, "job_not_finished", f"job {job_id!r} is {job.status.value}; its {name} are written when it ends"
        )
    if redirect:
        url = service.presigned_output_url(job, name)
        if url is not None:
            return RedirectResponse(url, status_code=307)
    else:
        chunks = service.open_output(job, name)
        if chunks is not None:
            return StreamingResponse(chunks, media_type="application/x-ndjson")
    raise ApiError(404, "output_not_found", f"job {job_id!r} has no {name} file")


_OUTPUT_RESPONSES = {
    200: {"content": {"application/x-ndjson": {}}, "description": "one JSON object per line, keyed by document id"},
    307: {"description": "redirect to a time-limited download URL (with `redirect=true`)"},
    404: _ERRORS[404],
    409: {"model": ErrorBody, "description": "the job has not finished"},
}
_REDIRECT = Query(description="answer 307 to a presigned download URL instead of streaming")


@router.get("/{job_id}/results", response_class=Response, responses=_OUTPUT_RESPONSES, summary="Job results")
def job_results(
    job_id: str, tenant: TenantDep, service: ServiceDep, redirect: Annotated[bool, _REDIRECT] = False
) -> Response:
    """The results of a finished job as JSONL, one line per succeeded document."""
    return _output(job_id, "results", redirect, tenant, service)


@router.get("/{job_id}/errors", response_class=Response, responses=_OUTPUT_RESPONSES, summary="Job errors")
def job_errors(
    job_id: str, tenant: TenantDep, service: ServiceDep, redirect: Annotated[bool, _REDIRECT] = False
) -> Response:
    """The errors of a finished job as JSONL, one line per failed document."""
    return _output(job_id, "errors", redirect, tenant, service)
