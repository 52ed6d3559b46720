"""WebSocket routes. Agents authenticate with a bearer token (no Origin header: not a browser)."""

from django.urls import path

from nodes.consumers import AgentConsumer

agent_urlpatterns = [path("ws/agent/", AgentConsumer.as_asgi())]
# Browser routes wrap their consumer in AllowedHostsOriginValidator (cross-site WebSocket hijacking).
browser_urlpatterns: list = []
