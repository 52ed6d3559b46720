"""Refuse what no view can use before any view runs: a NUL character in the path or in a query
parameter (PostgreSQL refuses NUL in text, so a lookup with one was a 500). The answer is a 400
in JSON naming the parameter (``path`` for the path), as the API's field errors are. Under /api/,
also a query parameter given more than once: every filter and cursor takes one value, and reading
the last copy would answer a question other than the one asked (as a JSON body's repeated key is
refused).

Also: with DEBUG on, Django answers an unknown URL with its HTML debug page, not handler404, so
under /api/ a client read HTML; ApiNotFoundInJson keeps that answer JSON in development too."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

NUL = "\x00"
NUL_MESSAGE = "must not contain a NUL character"
REPEATED_MESSAGE = "given more than once: give it once"


class RefuseNul:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if NUL in request.path_info:
            return JsonResponse({"path": [NUL_MESSAGE]}, status=400)
        api = request.path_info.startswith("/api/")
        for name, values in request.GET.lists():
            if NUL in name or any(NUL in value for value in values):
                return JsonResponse({name.replace(NUL, "\\0"): [NUL_MESSAGE]}, status=400)
            if api and len(values) > 1:
                return JsonResponse({name: [REPEATED_MESSAGE]}, status=400)
        return self.get_response(request)


class ApiNotFoundInJson:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (settings.DEBUG and response.status_code == 404 and request.path_info.startswith("/api/")
                and response.get("Content-Type", "").startswith("text/html")):
            return JsonResponse({"detail": "Not found."}, status=404)
        return response
