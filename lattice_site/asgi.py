"""ASGI entry point: HTTP through Django, WebSockets through Channels routing."""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lattice_site.settings.dev")
django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from lattice_site.http import BufferedWsgiHttp  # noqa: E402
from lattice_site.routing import agent_urlpatterns, browser_urlpatterns  # noqa: E402

http_app: object = BufferedWsgiHttp()  # one thread hop per request (see lattice_site/http.py)
if settings.DEBUG:
    # Development only; in production a reverse proxy serves collected static files.
    http_app = ASGIStaticFilesHandler(http_app)

if os.environ.get("LATTICE_EMBEDDED_LOOP") == "1" and not settings.REDIS_URL:
    from lattice_site import embedded

    embedded.start()

# Everything loaded so far lives as long as the process: keep it out of the
# collector's sweeps, which otherwise stall requests for milliseconds at random.
gc.freeze()
# A server holding thousands of WebSockets keeps their objects in the oldest generation,
# and a full collection walks them all: with 1,000 agents it stalled the loop for 100 ms
# and more (ack p99 270 to 390 ms at 4,000 heartbeats/s, 80 to 130 ms with these
# thresholds). Young collections come every 10,000 allocations instead of 700, full ones a
# hundred times less often; reference counting still frees everything that is not a cycle.
gc.set_threshold(10_000, 20, 1_000)

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": URLRouter([*agent_urlpatterns, *browser_urlpatterns]),
    }
)
