"""/ws/live/: the browser's live feed, authenticated by the Django session.

Operators join the ``ops`` group (every event); a tenant member joins only its
tenants' groups. Events arrive after commit (see dispatch.py) and are coalesced:
a socket gets at most one frame per ``COALESCE_S``, ``{"kind": "events",
"events": [...]}`` in the order they happened. An event after a quiet spell goes
out at once; only a burst waits, and then as one frame.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from lattice_site.consumers import DirectDispatch
from scheduling.dispatch import OPS_GROUP, keep_watchers_alive, subscribe, tenant_group
from scheduling.permissions import is_operator

COALESCE_S = 0.025


class LiveConsumer(DirectDispatch, AsyncJsonWebsocketConsumer):
    groups_joined: list[str]
    pending: list[dict[str, Any]]
    flusher: asyncio.Task[None] | None = None
    last_sent = float("-inf")

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.pending = []
        self.groups_joined = await database_sync_to_async(_groups_for)(user)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            await sync_to_async(subscribe, thread_sensitive=False)(group, +1)
        keep_watchers_alive()  # the count of a live process never lapses
        await self.accept()
        await self.send_json({"kind": "hello", "groups": len(self.groups_joined)})

    async def disconnect(self, code: int) -> None:
        if self.flusher is not None:
            self.flusher.cancel()
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
            await sync_to_async(subscribe, thread_sensitive=False)(group, -1)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        return None  # the feed is one-way

    async def live_event(self, message: dict[str, Any]) -> None:
        self.pending.append(message["event"])
        if self.flusher is not None:
            return  # a frame is already due: this event rides along
        wait = self.last_sent + COALESCE_S - asyncio.get_running_loop().time()
        if wait <= 0:
            await self._flush()
        else:
            self.flusher = asyncio.create_task(self._flush_after(wait))

    async def _flush_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self.flusher = None
        await self._flush()

    async def _flush(self) -> None:
        events, self.pending = self.pending, []
        if events:
            self.last_sent = asyncio.get_running_loop().time()
            await self.send_json({"kind": "events", "events": events})


def _groups_for(user: Any) -> list[str]:
    if is_operator(user):
        return [OPS_GROUP]
    return [tenant_group(t) for t in user.memberships.values_list("tenant_id", flat=True)]
