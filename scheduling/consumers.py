"""/ws/live/: the browser's live feed, authenticated by the Django session.

Operators join the ``ops`` group (every event); a tenant member joins only its
tenants' groups. Events arrive after commit (see dispatch.py) and are coalesced:
a socket gets at most one frame per ``COALESCE_S``, ``{"kind": "events",
"events": [...]}`` in the order they happened. An event after a quiet spell goes
out at once; only a burst waits, and then as one frame.

Access is not settled once at connect: after a logout, a removal from a tenant, a deactivation or
a deletion, the socket re-checks its session and tenants (see live_access.py) and drops the groups
the user may no longer hear, or closes with 4401 once the session no longer holds the user.

The feed is one-way: a frame from the browser, JSON or not, is ignored and never closes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from lattice_site.consumers import DirectDispatch
from scheduling.dispatch import keep_watchers_alive, subscribe, user_group
from scheduling.live_access import RECHECK_S, access, groups_for

COALESCE_S = 0.025


class LiveConsumer(DirectDispatch, AsyncJsonWebsocketConsumer):
    groups_joined: list[str]
    pending: list[dict[str, Any]]
    flusher: asyncio.Task[None] | None = None
    last_sent = float("-inf")
    checked_at = float("-inf")
    closed = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.pending = []
        self.user_pk = user.pk
        await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        self.groups_joined = []
        await self._join(await database_sync_to_async(groups_for)(user))
        self.checked_at = asyncio.get_running_loop().time()
        keep_watchers_alive()  # the count of a live process never lapses
        await self.accept()
        await self.send_json({"kind": "hello", "groups": len(self.groups_joined)})

    async def disconnect(self, code: int) -> None:
        if self.flusher is not None:
            self.flusher.cancel()
        if hasattr(self, "user_pk"):
            await self.channel_layer.group_discard(user_group(self.user_pk), self.channel_name)
        await self._leave(list(getattr(self, "groups_joined", [])))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        return None  # one-way: what a browser sends is ignored unread (not JSON is no reason to close)

    async def _join(self, groups: list[str]) -> None:
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
            await sync_to_async(subscribe, thread_sensitive=False)(group, +1)

    async def _leave(self, groups: list[str]) -> None:
        for group in groups:
            await self.channel_layer.group_discard(group, self.channel_name)
            self.groups_joined.remove(group)
            await sync_to_async(subscribe, thread_sensitive=False)(group, -1)

    async def live_recheck(self, message: dict[str, Any]) -> None:
        await self._recheck()

    async def _recheck(self) -> bool:
        """Whether the session still holds this user; keeps only the groups it may hear now."""
        self.checked_at = asyncio.get_running_loop().time()
        session = self.scope.get("session")
        allowed = await database_sync_to_async(access)(getattr(session, "session_key", None), self.user_pk)
        if allowed is None:
            self.closed, self.pending = True, []
            await self._leave(list(self.groups_joined))
            await self.close(code=4401)
            return False
        lost = [g for g in self.groups_joined if g not in allowed]
        if lost:
            self.pending = []  # (some may be of a group it lost; pages read the rest on load)
            await self._leave(lost)
        await self._join([g for g in allowed if g not in self.groups_joined])
        return True

    async def live_event(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        if asyncio.get_running_loop().time() - self.checked_at > RECHECK_S and not await self._recheck():
            return
        if message.get("group") not in self.groups_joined:
            return  # sent to a group it has left since (its members are looked up when sent)
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
        if events and not self.closed:
            self.last_sent = asyncio.get_running_loop().time()
            await self.send_json({"kind": "events", "events": events})
