"""/ws/agent/: the node agents' WebSocket (docs/agent-protocol.md).

Thin: authenticate in ``connect``, parse each frame into a strict type, call one
action in a pooled thread (``in_pool``), then answer ``ack`` (the action
committed) or ``error`` (nothing changed). Commands reach the agent through the
node's channel-layer group, so any Daphne process can reach any agent.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import orjson
from channels.db import DatabaseSyncToAsync
from channels.generic.websocket import AsyncWebsocketConsumer

from lattice_site.consumers import DirectDispatch
from nodes import actions, health
from nodes.heartbeats import batcher
from nodes.models import Node
from nodes.protocol import Ack, BadFrame, Error, Heartbeat, Hello, ack_text, encode, parse
from scheduling.dispatch import agent_group

CLOSE_AUTH = 4401
CLOSE_REPLACED = 4409
CLOSE_RATE = 4429
RATE_LIMIT = 50  # frames per second, sustained for RATE_WINDOW_S seconds
RATE_WINDOW_S = 5
HEALTH_REFRESH_S = 60  # unchanged GPU health stored this often (judged again only when it or the limit changes)


def in_pool(fn: Any) -> Any:
    """Run database work in the loop's thread pool rather than the one thread Channels shares by
    default: 2,000 agents reconnecting at once must not authenticate and reconcile one by one.
    A connection's frames stay in order (a consumer handles one message at a time); two
    connections for one node are serialised by the node's row lock."""
    return DatabaseSyncToAsync(fn, thread_sensitive=False)


class AgentConsumer(DirectDispatch, AsyncWebsocketConsumer):
    node: Node | None = None
    token_id: int | None = None  # the id of the token it authenticated with
    closing = False  # closed by the server: frames still queued from the agent are not applied
    since: list[Any]  # its number among the node's connections, and its channel: the newest stays
    health_key: tuple[Any, ...] | None = None  # the GPU health last judged or stored, and when (_health_due)
    health_at = 0.0

    async def connect(self) -> None:
        token = _bearer(self.scope)
        credential = await in_pool(actions.agent_connection)(token) if token else None
        if credential is None:
            await self.accept()
            await self.close(code=CLOSE_AUTH)
            return
        node, self.token_id, number = credential
        self.node = node
        self.group = agent_group(node.name)
        self.frames: deque[float] = deque()
        self.batcher = batcher()
        # The health the node has stored counts as judged: an agent reconnecting with the same
        # report is not judged again (2,000 agents after a restart would each cost a transaction).
        self.health_key = health.health_key(node.gpu_health if isinstance(node.gpu_health, list) else [],
                                            node.gpu_max_temperature_c)
        self.health_at = time.monotonic()
        # A second connection for the same node replaces the first: the newest (by its number,
        # counted by the database as it was authenticated) stays. Joined before it announces itself, so of two connections made at
        # once the later announcement always reaches the other one (announcing first, two could
        # each announce to a group the other had not joined yet, and both stay).
        self.since = [number, self.channel_name]
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_send(self.group, {"type": "agent.replaced", "by": self.channel_name,
                                                         "since": self.since})
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.node is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.node is None or self.closing:
            return
        if self._too_fast():
            await self._close(CLOSE_RATE)
            return
        try:
            frame = parse(text_data if text_data is not None else (bytes_data or b""))
        except BadFrame as exc:
            await self._send(encode(Error(id=exc.frame_id, code="BAD_FRAME", message=str(exc))))
            return
        if isinstance(frame, Heartbeat):  # persisted in batches, acknowledged after their commit
            if await self.batcher.submit(self.node.pk, frame.seq):
                if frame.gpus is not None:
                    await self._gpu_health(frame.gpus)
                await self.base_send({"type": "websocket.send", "text": ack_text(frame.id)})
            else:
                await self._send(encode(Error(id=frame.id, code="STALE_SEQUENCE",
                                              message=f"seq {frame.seq} is not greater than the last accepted one")))
            return
        try:
            replies = await in_pool(self._apply)(frame)
        except actions.FrameRefused as exc:
            await self._send(encode(Error(id=frame.id, code=exc.code, message=exc.message)))
            return
        for reply in replies:
            await self._send(reply)
        await self._send(encode(Ack(id=frame.id)))

    def _apply(self, frame: Any) -> list[dict[str, Any]]:
        assert self.node is not None
        if isinstance(frame, Hello):
            return actions.node_hello(node=self.node, frame=frame).frames
        if isinstance(frame, Heartbeat):
            actions.node_heartbeat(node=self.node, frame=frame)
            return []
        actions.allocation_report(node=self.node, frame=frame)
        return []

    async def _gpu_health(self, gpus: list[dict[str, Any]]) -> None:
        """Judge GPU health (nodes/health.py) when something that matters changed since it was
        last judged or stored: a counter, a flag, an Xid or which side of the temperature limit a
        GPU is on. Temperatures move every heartbeat, so the node's row is not written with each:
        once a minute the readings are stored, in one statement, with nothing to judge."""
        assert self.node is not None
        key = health.health_key(gpus, self.node.gpu_max_temperature_c)
        now = time.monotonic()
        if key == self.health_key:
            if now - self.health_at < HEALTH_REFRESH_S:
                return
            self.health_at = now
            limit = await in_pool(health.node_gpu_readings)(node_id=self.node.pk, gpus=gpus)
            if limit is not None and limit == self.node.gpu_max_temperature_c:
                return
            if limit is not None:  # an operator moved the limit: judged again under it
                self.node.gpu_max_temperature_c = limit
                key = health.health_key(gpus, limit)
        await in_pool(health.node_gpu_health)(node=self.node, gpus=gpus)
        self.health_key, self.health_at = key, now  # judged: only now does the same report count as judged

    def _too_fast(self) -> bool:
        now = time.monotonic()
        self.frames.append(now)
        while self.frames and self.frames[0] < now - RATE_WINDOW_S:
            self.frames.popleft()
        return len(self.frames) > RATE_LIMIT * RATE_WINDOW_S

    async def _send(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=orjson.dumps(frame).decode())

    # -- channel-layer messages ------------------------------------------------------------
    async def agent_command(self, message: dict[str, Any]) -> None:
        await self._send(message["frame"])

    async def agent_replaced(self, message: dict[str, Any]) -> None:
        """Another connection of the node announced itself: this one leaves if that one is newer;
        if it is older, it is told to leave (it may have announced itself before this one joined)."""
        if message["by"] == self.channel_name or self.closing:  # (a closing one contests nothing)
            return
        if list(message.get("since") or [0, ""]) > self.since:
            await self._close(CLOSE_REPLACED)
        else:
            await self.channel_layer.send(message["by"], {"type": "agent.replaced", "by": self.channel_name,
                                                          "since": self.since})

    async def agent_revoked(self, message: dict[str, Any]) -> None:
        """The node's tokens were revoked: this connection's token is no longer good. (A connection
        made with a token issued in the same transaction joins the group after this is sent.) When
        the message names the revoked tokens, a connection made with another token stays."""
        tokens = message.get("tokens")
        if tokens is not None and self.token_id not in tokens:
            return
        await self._close(CLOSE_AUTH)

    async def _close(self, code: int) -> None:
        """Close, and apply nothing more: the frames the agent sent before the close reached it are
        still queued, and a revoked or replaced connection's frames must change nothing."""
        self.closing = True
        await self.close(code=code)


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            parts = value.decode("latin-1").split()
            if len(parts) == 2 and parts[0].lower() == "bearer":
                return parts[1]
    return None
