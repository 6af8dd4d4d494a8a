"""The one JSON error body of the API and the handlers that produce it.

Every error answers `{"error": {"code": ..., "message": ..., "field": ...}}` (`field` only where one input is
to blame), so clients need a single parser and bad input never surfaces as a 500.
"""
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from botocore.exceptions import ConnectionError as S3ConnectionError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.logging import get_logger

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "unavailable",
}


# A dependency that does not answer is the service's trouble, not the client's: 503, so clients retry.
_DEPENDENCY_ERRORS: dict[type[Exception], str] = {
    RedisConnectionError: "redis",
    RedisTimeoutError: "redis",
    BrokerError: "the task queue (redis)",
    S3ConnectionError: "s3",
}


class ApiError(Exception):
    """An error answered to the client as the common error body."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers


def error_response(
    status_code: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """Build the common error body as a response."""
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return JSONResponse({"error": error}, status_code=status_code, headers=headers)


def field_path(loc: Sequence[str | int]) -> str:
    """Render a pydantic error location as a field path like `documents[3].text`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _validation_error_response(exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    loc = list(first.get("loc", ()))
    source = loc.pop(0) if loc and loc[0] in ("body", "query", "path", "header") else None
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", first.get("msg", ""))
        position = f" at position {loc[0]}" if loc else ""
        return error_response(422, "invalid_json", f"the request body is not valid JSON: {detail}{position}")
    if source == "body" and not loc and first.get("type") == "missing":
        return error_response(422, "invalid_request", "a JSON request body is required")
    field = field_path(loc) or None
    message = first.get("msg", "invalid value").removeprefix("Value error, ")
    if field:
        message = f"{field}: {message}"
    elif source == "body":
        message = f"request body: {message}"
    return error_response(422, "invalid_request", message, field)


def _unavailable_handler(dependency: str) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        get_logger().warning("dependency unavailable", dependency=dependency, path=request.url.path, error=repr(exc))
        return error_response(
            503, "unavailable", f"{dependency} is unavailable; try again later", headers={"Retry-After": "5"}
        )

    return unavailable


def install_error_handlers(app: FastAPI) -> None:
    """Make every error the app answers use the common error body."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status_code, exc.code, exc.message, exc.field, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, UnicodeDecodeError):
            return error_response(422, "invalid_json", f"the request body is not UTF-8 encoded JSON: {exc.__cause__}")
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    for exc_class, dependency in _DEPENDENCY_ERRORS.items():
        app.add_exception_handler(exc_class, _unavailable_handler(dependency))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        get_logger().exception("unhandled error", path=request.url.path, error=repr(exc))
        return error_response(500, "internal_error", "internal server error")
