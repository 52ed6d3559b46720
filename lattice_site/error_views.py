"""Django's own error answers (an unknown URL, a request refused before any view, a crash), in
JSON under /api/ as every API error is; the pages keep Django's."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def _api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def bad_request(request: HttpRequest, exception: Any, **kwargs: Any) -> HttpResponse:
    if _api(request):
        return JsonResponse({"detail": "Bad request."}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Any, **kwargs: Any) -> HttpResponse:
    if _api(request):
        return JsonResponse({"detail": "You do not have permission to perform this action."}, status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Any, **kwargs: Any) -> HttpResponse:
    if _api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    if _api(request):
        return JsonResponse({"detail": "Server error."}, status=500)
    return defaults.server_error(request)
