"""Dependencies of the routes, as Annotated aliases: the settings, the job service and the caller's tenant.

They are `async def` although they do not wait on anything: FastAPI runs plain `def` dependencies in its thread
pool, and a thread hop costs more than these take."""
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.auth import authenticate
from core.service import JobService
from core.settings import Settings

# Only declares the scheme in the OpenAPI schema; `authenticated_tenant` does the checking and the 401s.
_bearer = HTTPBearer(auto_error=False, description="an API key issued to your tenant")


async def app_settings(request: Request) -> Settings:
    """The settings the app was built with."""
    return request.app.state.settings


async def job_service(request: Request) -> JobService:
    """The app's job service."""
    return request.app.state.service


async def authenticated_tenant(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """The tenant of the request's bearer API key; 401 without a valid one."""
    return authenticate(request.headers.get("authorization"), request.app.state.api_keys)


SettingsDep = Annotated[Settings, Depends(app_settings)]
ServiceDep = Annotated[JobService, Depends(job_service)]
TenantDep = Annotated[str, Depends(authenticated_tenant)]
