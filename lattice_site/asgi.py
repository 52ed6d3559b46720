"""ASGI entry point: HTTP through Django, WebSockets through Channels routing."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lattice_site.settings.dev")
django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from lattice_site import server_tuning  # noqa: E402
from lattice_site.http import BufferedWsgiHttp  # noqa: E402
from lattice_site.routing import agent_urlpatterns, browser_urlpatterns, fallback_urlpatterns  # noqa: E402

http_app: object = BufferedWsgiHttp()  # one thread hop per request (see lattice_site/http.py)
if settings.DEBUG:
    # Development only; in production a reverse proxy serves collected static files.
    http_app = ASGIStaticFilesHandler(http_app)

if os.environ.get("LATTICE_EMBEDDED_LOOP") == "1" and not settings.REDIS_URL:
    from lattice_site import embedded

    embedded.start()

server_tuning.for_daphne()  # before Daphne builds its WebSocket factory, after everything is loaded

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": URLRouter([*agent_urlpatterns, *browser_urlpatterns, *fallback_urlpatterns]),
    }
)
