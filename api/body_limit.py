"""ASGI middleware that refuses request bodies over `max_request_bytes` before anything parses them."""
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response


class BodySizeLimitMiddleware:
    """Answer 413 when Content-Length or the bytes actually sent exceed the limit.

    The body is read here (bounded) and replayed to the app, so a client that lies about Content-Length, or
    sends chunked data, cannot make the app buffer more than the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413,
            "payload_too_large",
            f"the request body exceeds max_request_bytes ({self.max_bytes} bytes)",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
