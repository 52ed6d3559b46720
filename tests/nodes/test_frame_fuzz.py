"""Whatever an agent sends, the socket answers it (``ack`` or ``error``) and stays open.

Property: for every frame (random JSON of any shape, valid frames with a field
dropped, added or replaced, frames over the protocol's size limit, text that is
not JSON, binary frames, bytes that are not UTF-8) the real agent consumer
answers with an ``ack`` or an ``error`` (commands such as ``welcome`` or ``kill``
may come first), never closes or drops the socket, and afterwards still
acknowledges a valid heartbeat.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattice_site.asgi import application
from nodes.actions import agent_token_issue
from nodes.models import Node
from nodes.protocol import MAX_FRAME_BYTES
from scheduling.models import Placement

pytestmark = pytest.mark.django_db(transaction=True)

ANSWERS = {"ack", "error"}
COMMANDS = {"welcome", "start", "checkpoint", "terminate", "kill"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
ids = st.text(max_size=12) | st.sampled_from(["x" * 128, "x" * 129, "a\x00b", "", "²"])
alloc_ids = st.sampled_from(["ALLOC", "²", "１", "0", "-1", "9" * 19, "9" * 20, " 1", "1.0"]) | st.text(max_size=6)


def _valid(alloc: str) -> st.SearchStrategy[dict[str, Any]]:
    """Frames of every type, valid apart from what a mutation does to them."""
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("hello"), "id": ids, "agent_version": st.text(max_size=40),
                               "capacity": st.dictionaries(st.text(max_size=5), st.integers(0, 64), max_size=3),
                               "labels": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
                               "running": st.lists(st.fixed_dictionaries(
                                   {"allocation": alloc_ids | st.just(alloc)},
                                   optional={"phase": st.text(max_size=8), "pid": st.integers()}), max_size=3)}),
        st.fixed_dictionaries({"type": st.just("heartbeat"), "id": ids, "seq": st.integers(-5, 2**64),
                               "running": st.lists(alloc_ids | st.just(alloc), max_size=3)},
                              optional={"usage": st.dictionaries(st.text(max_size=5), json_values, max_size=3)}),
        st.fixed_dictionaries({"type": st.just("started"), "id": ids, "allocation": alloc_ids | st.just(alloc),
                               "pid": st.integers(-1, 2**40)}),
        st.fixed_dictionaries({"type": st.just("exited"), "id": ids, "allocation": alloc_ids | st.just(alloc),
                               "exit_code": st.none() | st.integers(-(2**33), 2**33),
                               "reason": st.sampled_from(["completed", "failed", "terminated", "killed", "bored"])}),
        st.fixed_dictionaries({"type": st.just("checkpoint_progress"), "id": ids,
                               "allocation": alloc_ids | st.just(alloc),
                               "percent": st.floats(-10, 1e300, allow_nan=False) | st.integers(-5, 200)},
                              optional={"eta_s": st.none() | st.floats(allow_nan=False, allow_infinity=False)}),
        st.fixed_dictionaries({"type": st.just("checkpoint_done"), "id": ids, "allocation": alloc_ids | st.just(alloc),
                               "ok": st.booleans()},
                              optional={"location": st.text(max_size=600), "size_bytes": st.integers(-1, 2**64),
                                        "error": st.text(max_size=300)}),
        st.fixed_dictionaries({"type": st.just("defer"), "id": ids, "allocation": alloc_ids | st.just(alloc),
                               "seconds": st.integers(-5, 2**40)}),
    )


@st.composite
def _mutated(draw: st.DrawFn, alloc: str) -> dict[str, Any]:
    frame = dict(draw(_valid(alloc)))
    how = draw(st.sampled_from(["none", "drop", "add", "replace"]))
    if how == "drop":
        frame.pop(draw(st.sampled_from(sorted(frame))))
    elif how == "add":
        frame[draw(st.text(max_size=8))] = draw(json_values)
    elif how == "replace":
        frame[draw(st.sampled_from(sorted(frame)))] = draw(json_values)
    return frame


def _frames(alloc: str) -> st.SearchStrategy[tuple[str, Any]]:
    """(how to send, payload): text or bytes."""
    as_text = st.one_of(
        json_values.map(json.dumps),
        _mutated(alloc).map(json.dumps),
        st.text(max_size=60),
        st.integers(MAX_FRAME_BYTES - 100, 3 * MAX_FRAME_BYTES).map(
            lambda n: json.dumps({"type": "heartbeat", "id": "big", "seq": 1, "running": [], "usage": {"p": "x" * n}})),
    )
    return st.one_of(
        as_text.map(lambda t: ("text", t)),
        st.binary(max_size=60).map(lambda b: ("bytes", b)),
        _mutated(alloc).map(lambda f: ("bytes", json.dumps(f).encode())),
    )


@pytest.fixture
def fuzz_target(node_gpu_a, make_allocation, vcluster_hpc):
    """gpu-a with a token and an allocation running on it, so valid reports reach the actions."""
    alloc = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                            started_at=timezone.now(), ran_on=["gpu-a"])
    Placement.objects.create(allocation=alloc, node=node_gpu_a, gpu=8)
    return node_gpu_a, agent_token_issue(node=node_gpu_a), str(alloc.pk)


async def _answer(comm: WebsocketCommunicator) -> dict[str, Any]:
    """The next ack or error, past any commands; a close or a crash fails the property."""
    while True:
        out = await comm.receive_output(timeout=10)
        assert out["type"] == "websocket.send", f"the socket was closed: {out}"
        frame = json.loads(out["text"])
        if frame["type"] in ANSWERS:
            return frame
        assert frame["type"] in COMMANDS, frame


def _reset_seq(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(last_seq=0)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_every_frame_is_answered_and_the_socket_stays_open(fuzz_target, data):
    node, token, alloc = fuzz_target
    frames = data.draw(st.lists(_frames(alloc), min_size=1, max_size=4), label="frames")

    async def scenario() -> dict[str, Any]:
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization",
                                                                          f"Bearer {token}".encode())])
        assert (await comm.connect(timeout=10))[0]
        try:
            for kind, payload in frames:
                # as the server hands a frame over (send_to refuses an empty one)
                await comm.send_input({"type": "websocket.receive", kind: payload})
                await _answer(comm)
            await database_sync_to_async(_reset_seq)(node)
            await comm.send_to(text_data=json.dumps({"type": "heartbeat", "id": "still-there", "seq": 1,
                                                     "running": []}))
            return await _answer(comm)
        finally:
            await comm.disconnect()

    assert async_to_sync(scenario)() == {"type": "ack", "id": "still-there"}
