"""HTTP under Daphne through Django's WSGI handler, one worker-thread hop per request.

Django's ASGI handler runs every synchronous middleware hook and the view in
separate hops between the event loop and a thread: with the seven middlewares
here that is about fifteen hops, some 5 ms of CPU per request before any work.
All of Lattice's views are synchronous, so this adapter reads the request body
on the loop, runs the whole request (middleware, view, response) in one pooled
thread through the WSGI handler, closes the response there (which ends the
request and hands its database connection back), and sends the buffered
response from the loop. Responses are buffered: Lattice streams nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from tempfile import SpooledTemporaryFile
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.wsgi import WSGIHandler

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
BODY_IN_MEMORY = 1 << 20


class BufferedWsgiHttp:
    """An ASGI HTTP application running Django's WSGI handler in a thread pool."""

    def __init__(self) -> None:
        self.handler = WSGIHandler()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"HTTP only, not {scope['type']}")
        with SpooledTemporaryFile(max_size=BODY_IN_MEMORY) as body:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away before sending its request
                body.write(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body.seek(0)
            status, headers, chunks = await sync_to_async(self._respond, thread_sensitive=False)(scope, body)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"".join(chunks)})

    def _respond(self, scope: dict[str, Any], body: Any) -> tuple[int, list[tuple[bytes, bytes]], list[bytes]]:
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started["status"] = int(status.split(" ", 1)[0])
            started["headers"] = [(k.lower().encode("latin1"), v.encode("latin1")) for k, v in headers]
            return lambda data: chunks.append(data)

        chunks: list[bytes] = []
        result = self.handler(environ(scope, body), start_response)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()  # fires request_finished: the connection goes back to the pool
        return started["status"], started["headers"], chunks


def environ(scope: dict[str, Any], body: Any) -> dict[str, Any]:
    """The WSGI environ for an ASGI HTTP scope (PEP 3333 names, headers as HTTP_*)."""
    script_name = scope.get("root_path", "")
    path = scope["path"]
    if script_name and path.startswith(script_name):
        path = path[len(script_name):]
    server = scope.get("server") or ("localhost", 80)
    env: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": script_name.encode("utf8").decode("latin1"),
        "PATH_INFO": path.encode("utf8").decode("latin1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin1"),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1] or 80),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if scope.get("client"):
        env["REMOTE_ADDR"] = scope["client"][0]
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin1").upper().replace("-", "_")
        if name not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            name = f"HTTP_{name}"
        value = raw_value.decode("latin1")
        if name in env:  # a repeated header: cookies join with "; ", the rest with ","
            value = f"{env[name]}{'; ' if name == 'HTTP_COOKIE' else ','}{value}"
        env[name] = value
    return env
