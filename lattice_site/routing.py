"""WebSocket routes. Agents (not browsers) authenticate with a bearer token."""


websocket_urlpatterns: list = []
