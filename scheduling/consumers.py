"""/ws/live/: the browser's live feed, authenticated by the Django session.

Operators join the ``ops`` group (every event); a tenant member joins only its
tenants' groups. Events arrive after commit (see dispatch.py).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from scheduling.api.permissions import is_operator
from scheduling.dispatch import OPS_GROUP, subscribe, tenant_group


class LiveConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.groups_joined = await database_sync_to_async(_groups_for)(user)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            await sync_to_async(subscribe, thread_sensitive=False)(group, +1)
        await self.accept()
        await self.send_json({"kind": "hello", "groups": len(self.groups_joined)})

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
            await sync_to_async(subscribe, thread_sensitive=False)(group, -1)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        return None  # the feed is one-way

    async def live_event(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])


def _groups_for(user: Any) -> list[str]:
    if is_operator(user):
        return [OPS_GROUP]
    return [tenant_group(t) for t in user.memberships.values_list("tenant_id", flat=True)]
