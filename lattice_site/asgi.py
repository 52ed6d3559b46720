"""ASGI entry point: HTTP through Django, WebSockets through Channels routing."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lattice_site.settings.dev")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from lattice_site.routing import agent_urlpatterns, browser_urlpatterns  # noqa: E402

if settings.DEBUG:
    # Development only; in production a reverse proxy serves collected static files.
    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

if os.environ.get("LATTICE_EMBEDDED_LOOP") == "1" and not settings.REDIS_URL:
    from lattice_site import embedded

    embedded.start()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter([*agent_urlpatterns, *browser_urlpatterns]),
    }
)
