"""One handler maps domain errors to HTTP; DRF handles the rest."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from scheduling.engine import InvalidDocument
from scheduling.errors import DomainError


def field_errors(exc: InvalidDocument) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, message in exc.errors:
        out.setdefault(path, []).append(message)
    return out


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, InvalidDocument):
        return Response(field_errors(exc), status=400)
    if isinstance(exc, RequestDataTooBig):  # Django's own answer is an HTML 400
        return Response({"detail": "The request body is larger than this server accepts "
                                   f"({settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)."}, status=413)
    if isinstance(exc, TooManyFieldsSent):
        return Response({"detail": str(exc)}, status=400)
    if isinstance(exc, DomainError):
        return Response({"error": exc.code, "detail": exc.message, **exc.detail}, status=exc.status)
    return drf_exception_handler(exc, context)
