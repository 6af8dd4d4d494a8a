"""Response bodies of the API beyond `core.jobs.Job`."""
from pydantic import BaseModel, Field

from core.jobs import Job


class JobPage(BaseModel):
    """One page of a tenant's jobs, newest first."""

    jobs: list[Job]
    next_cursor: str | None = Field(None, description="pass as `cursor` for the next page; null on the last page")


class ErrorDetail(BaseModel):
    """What went wrong: a stable `code`, a readable `message` and, where one input is to blame, its `field`."""

    code: str
    message: str
    field: str | None = None


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


class Health(BaseModel):
    """Liveness or readiness; `checks` names each dependency and whether it answered."""

    status: str
    checks: dict[str, str] = Field(default_factory=dict)
