"""ReDoc's bundle, served with nothing in it fetched from the internet.

drf-spectacular-sidecar ships ReDoc's standalone bundle, but the bundle's side menu shows
Redocly's logo as an image from https://cdn.redoc.ly: on a cluster with no internet access that is
a failed request (and a console error) on every visit to /api/redoc/. This view serves the
sidecar's bundle with that one address emptied; the image then fails locally, and ReDoc hides
it (its own onError), leaving the "API docs by Redocly" link as text. Both docs pages answer GET
and HEAD only."""

from __future__ import annotations

import functools
from pathlib import Path

from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
REMOTE_LOGO = b'"https://cdn.redoc.ly/redoc/logo-mini.svg"'
# What drf-spectacular's REDOC_DIST names: the view below answers <REDOC_DIST>/bundles/redoc.standalone.js.
REDOC_DIST = "/api/redoc-dist"


@functools.cache
def offline_bundle() -> bytes:
    found = finders.find(BUNDLE)
    if not found:
        raise FileNotFoundError(BUNDLE)
    return Path(str(found)).read_bytes().replace(REMOTE_LOGO, b'""')


@require_safe
@cache_control(public=True, max_age=86400)
def redoc_bundle(request: HttpRequest) -> HttpResponse:
    return HttpResponse(offline_bundle(), content_type="text/javascript; charset=utf-8")


class SwaggerView(SpectacularSwaggerView):
    """Swagger UI's page, read only: DRF answered OPTIONS with its metadata rendered through the
    page's template renderer, which has no template for it (a 500); other methods are a 405."""

    http_method_names = ["get", "head"]


class RedocView(SpectacularRedocView):
    """ReDoc's page, read only as Swagger UI's (OPTIONS rendered the page for its metadata)."""

    http_method_names = ["get", "head"]
