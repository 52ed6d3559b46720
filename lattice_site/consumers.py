"""What every Lattice WebSocket consumer shares."""

from __future__ import annotations

from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer


class DirectDispatch:
    """Dispatch each message straight to its handler.

    Channels' own dispatch first closes stale database connections, which costs a hop
    to the shared sync thread and back for every frame, heartbeat or live event. Lattice's
    consumers never touch the database in the event loop: every query runs through
    ``database_sync_to_async``, which closes stale connections in its own thread before
    and after the call, so that hop only added latency and CPU. Mix in before the
    Channels base class."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class NoRoute(AsyncWebsocketConsumer):
    """A WebSocket to a path no route serves: refused at the handshake (403), as a page that does
    not exist is a 404, not a server error with a traceback in the log for every such probe."""

    async def connect(self) -> None:
        await self.close()
