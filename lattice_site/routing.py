"""WebSocket routes. Agents (not browsers) authenticate with a bearer token."""

from django.urls import path

websocket_urlpatterns: list = []
