"""WebSocket routes. Agents authenticate with a bearer token (no Origin header: not a browser);
browsers with their session, and their Origin is checked against ALLOWED_HOSTS."""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path, re_path

from lattice_site.consumers import NoRoute
from nodes.consumers import AgentConsumer
from scheduling.consumers import LiveConsumer

agent_urlpatterns = [path("ws/agent/", AgentConsumer.as_asgi())]
browser_urlpatterns = [
    path("ws/live/", AllowedHostsOriginValidator(AuthMiddlewareStack(LiveConsumer.as_asgi()))),
]
# Last: any other path is refused at the handshake rather than failing in the router.
fallback_urlpatterns = [re_path(r"", NoRoute.as_asgi())]
