"""Log lines with their time, level and logger, as text or as JSON lines, and a request id on
every line a request causes: the request's own, the tasks it sends, their logs in the worker.

A request's id is its ``X-Request-ID`` header when that is a plain token (a proxy or a client
may set one to follow a request through its own logs), else a fresh one; it is sent back in the
response's ``X-Request-ID``. Settings' LOGGING uses the formatters and the filter below.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any

from celery.signals import before_task_publish, task_postrun, task_prerun
from django.core.signals import request_finished
from django.http import HttpRequest, HttpResponse
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

REQUEST_ID: ContextVar[str] = ContextVar("lattice_request_id", default="-")
HEADER = "X-Request-ID"
TASK_HEADER = "lattice_request_id"
# Letters, digits and . _ : - only: it goes into log lines and a response header as it is.
_SAFE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def _utc(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """One line: ISO 8601 time in UTC, level, logger, request id, message."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _utc(record)


class JsonFormatter(_JsonFormatter):
    """One JSON object a line: time, level, logger, request_id, message, and any extra fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"})
        super().__init__(*args, **kwargs)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _utc(record)


class RequestIdFilter(logging.Filter):
    """Puts the current request's id (or "-") on every record a handler writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


class RefusalWithoutTraceback(logging.Filter):
    """A 4xx that Django logs with its exception (PermissionDenied: "Forbidden (Permission denied)")
    is a refusal, not a fault: one line, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True


def request_id_from(header: str | None) -> str:
    return header if header and _SAFE.fullmatch(header) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Sets the request's id for its logs, and answers with it. Django logs a 4xx or 5xx after
    the middlewares have returned, so the id is cleared when the request finishes, not here."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.headers.get(HEADER))
        REQUEST_ID.set(request_id)
        response = self.get_response(request)
        response[HEADER] = request_id
        return response


@request_finished.connect
def _forget_request(**_: Any) -> None:
    REQUEST_ID.set("-")


@before_task_publish.connect
def _carry_to_task(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = REQUEST_ID.get()
    if headers is not None and request_id != "-":
        headers[TASK_HEADER] = request_id


_task_tokens: dict[str, Token[str]] = {}


@task_prerun.connect
def _take_from_task(task_id: str = "", task: Any = None, **_: Any) -> None:
    """A worker's task logs with the id of the request that sent it. A task run in the sending
    process itself (no broker: the embedded mode) already has the request's id."""
    request = getattr(task, "request", None)
    found = getattr(request, TASK_HEADER, None) or (getattr(request, "headers", None) or {}).get(TASK_HEADER)
    if isinstance(found, str) and _SAFE.fullmatch(found):
        _task_tokens[task_id] = REQUEST_ID.set(found)


@task_postrun.connect
def _task_done(task_id: str = "", **_: Any) -> None:
    token = _task_tokens.pop(task_id, None)
    if token is not None:
        REQUEST_ID.reset(token)
