"""How large frames are answered through a real Daphne.

Up to the protocol's 64 KiB a frame is parsed; above it, up to the server's
WebSocket limit (1 MiB, Daphne's default), it is answered BAD_FRAME and the
connection stays open; past the server's limit the connection is closed with 1009
("message too big"), so the agent learns why instead of seeing its socket vanish. And a
report whose id was used for another report is refused there too.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from nodes.actions import agent_token_issue
from nodes.protocol import MAX_FRAME_BYTES
from tests.nodes.test_end_to_end import control_plane, daphne  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SERVER_MAX_BYTES = 1024 * 1024


def _heartbeat(frame_id: str, seq: int, pad: int = 0) -> str:
    frame = {"type": "heartbeat", "id": frame_id, "seq": seq, "running": []}
    if pad:
        frame["usage"] = {"pad": "x" * pad}
    return json.dumps(frame)


def test_frames_past_the_protocol_limit_get_bad_frame_and_past_the_server_s_a_1009(daphne, node_gpu_a):  # noqa: F811
    token = agent_token_issue(node=node_gpu_a)
    url = f"ws://127.0.0.1:{daphne}/ws/agent/"

    async def scenario():
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                      max_size=None) as ws:
            await ws.send(_heartbeat("big", 1, pad=MAX_FRAME_BYTES))
            over_protocol = json.loads(await asyncio.wait_for(ws.recv(), 10))
            await ws.send(_heartbeat("ok", 2))
            still_open = json.loads(await asyncio.wait_for(ws.recv(), 10))
            await ws.send(_heartbeat("huge", 3, pad=SERVER_MAX_BYTES))
            try:
                await asyncio.wait_for(ws.recv(), 10)
            except websockets.ConnectionClosed as exc:
                closed = exc.rcvd.code if exc.rcvd else None
            else:
                closed = "not closed"
        return over_protocol, still_open, closed

    over_protocol, still_open, closed = asyncio.run(scenario())
    assert (over_protocol["type"], over_protocol["id"], over_protocol["code"]) == ("error", "big", "BAD_FRAME")
    assert still_open == {"type": "ack", "id": "ok"}
    assert closed == 1009


def test_a_report_id_reused_with_other_content_is_refused_through_a_real_daphne(daphne, node_gpu_a,  # noqa: F811
                                                                               make_allocation, vcluster_hpc):
    from scheduling.models import AllocationEvent
    from tests.nodes.test_consumer import _running_here

    alloc = _running_here(make_allocation, vcluster_hpc, node_gpu_a)
    token = agent_token_issue(node=node_gpu_a)
    url = f"ws://127.0.0.1:{daphne}/ws/agent/"
    started = {"type": "started", "id": "r1", "allocation": str(alloc.pk), "pid": 99}
    exited = {"type": "exited", "id": "r1", "allocation": str(alloc.pk), "exit_code": 0, "reason": "completed"}

    async def scenario():
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            out = []
            for frame in (started, exited, started):
                await ws.send(json.dumps(frame))
                out.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        return out

    first, reused, again = asyncio.run(scenario())
    assert first == again == {"type": "ack", "id": "r1"}
    assert (reused["type"], reused["id"], reused["code"]) == ("error", "r1", "ID_REUSED")
    alloc.refresh_from_db()
    assert alloc.state == "running" and alloc.exit_code is None
    assert list(AllocationEvent.objects.filter(allocation=alloc, reason__startswith="started on")
                .values_list("reason", flat=True)) == ["started on gpu-a (pid 99)"]
