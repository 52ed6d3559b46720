"""The agent WebSocket against the real router: every frame type, error and close code."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from lattice_site.asgi import application
from nodes.actions import agent_token_issue
from nodes.models import AgentToken, Node, NodeState
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_node(node_gpu_a):
    """gpu-a with an issued agent token (the agent's credential)."""
    return node_gpu_a, agent_token_issue(node=node_gpu_a)


def _comm(token: str | None) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return WebsocketCommunicator(application, "/ws/agent/", headers=headers)


def run(coro_fn):
    return async_to_sync(coro_fn)()


async def _send(comm, frame):
    await comm.send_to(text_data=json.dumps(frame))
    return json.loads(await comm.receive_from(timeout=5))


async def _hello(comm, frame_id: str = "h1") -> None:
    """An empty hello (nothing running), its replies read up to and including its ack."""
    reply = await _send(comm, {"type": "hello", "id": frame_id, "agent_version": "1.0", "capacity": {},
                               "labels": {}, "running": []})
    while reply != {"type": "ack", "id": frame_id}:
        reply = json.loads(await comm.receive_from(timeout=5))


def _running_here(make_allocation, vcluster_hpc, node, **kw) -> Allocation:
    fields = {"state": "running", "node_count": 1, "per_node_gpu": 8, "preemption_class": 1,
              "checkpoint": "auto", "vcluster": vcluster_hpc, "started_at": timezone.now(), "ran_on": [node.name],
              **kw}
    alloc = make_allocation(**fields)
    Placement.objects.create(allocation=alloc, node=node, gpu=8)
    return alloc


def _silent_and_drained(node: Node) -> timezone.datetime:
    """The node last heard from five minutes ago and draining, so that no pass starts a requeued
    copy there while the test's frames are on their way; returns when its lost work started."""
    node.last_heartbeat_at = timezone.now() - timezone.timedelta(minutes=5)
    node.state = NodeState.DRAINING
    node.save()
    return node.last_heartbeat_at - timezone.timedelta(minutes=1)


def _lost_here(make_allocation, vcluster_hpc, node: Node, **kw) -> Allocation:
    """Work running on a node that went silent (and is drained): its agent's hello will not list it."""
    fields = {"requeue_policy": "on_node_failure", **kw}
    return _running_here(make_allocation, vcluster_hpc, node, started_at=_silent_and_drained(node), **fields)


def test_missing_or_wrong_token_is_refused_with_4401_and_changes_nothing(agent_node):
    node, token = agent_node

    async def scenario():
        for bad in (None, token[:-3] + "abc"):
            comm = _comm(bad)
            connected, _ = await comm.connect(timeout=10)
            out = await comm.receive_output(timeout=5)
            assert out == {"type": "websocket.close", "code": 4401}
            await comm.disconnect()

    run(scenario)
    node.refresh_from_db()
    assert node.last_heartbeat_at is None and node.agent_version == ""


def test_hello_welcomes_and_reconciles_both_ways(agent_node, make_allocation, vcluster_hpc):
    node, token = agent_node
    node.last_heartbeat_at = timezone.now() - timezone.timedelta(minutes=5)
    node.save()
    lost = _running_here(make_allocation, vcluster_hpc, node, started_at=node.last_heartbeat_at - timezone.timedelta(minutes=1))
    ended = make_allocation(state="completed")

    async def scenario():
        comm = _comm(token)
        assert (await comm.connect(timeout=10))[0]
        await comm.send_to(text_data=json.dumps({
            "type": "hello", "id": "h1", "agent_version": "1.0", "capacity": {"gpu": 8}, "labels": {},
            "running": [{"allocation": str(ended.pk), "phase": "running", "pid": 4}]}))
        frames = [json.loads(await comm.receive_from(timeout=5)) for _ in range(3)]
        await comm.disconnect()
        return frames

    frames = run(scenario)
    assert frames[0] == {"type": "welcome", "node": "gpu-a", "heartbeat_interval_s": 10}
    assert frames[1] == {"type": "kill", "allocation": str(ended.pk)}
    assert frames[2] == {"type": "ack", "id": "h1"}
    lost.refresh_from_db()
    assert lost.state == "failed"
    assert Allocation.objects.filter(requeued_from=lost).exists()  # on_node_failure: a fresh copy
    node.refresh_from_db()
    assert node.agent_version == "1.0" and node.state == "ready"


def test_heartbeat_sequence_must_increase(agent_node):
    node, token = agent_node

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        first = await _send(comm, {"type": "heartbeat", "id": "b1", "seq": 5, "running": []})
        stale = await _send(comm, {"type": "heartbeat", "id": "b2", "seq": 5, "running": []})
        await comm.disconnect()
        return first, stale

    first, stale = run(scenario)
    assert first == {"type": "ack", "id": "b1"}
    assert stale["code"] == "STALE_SEQUENCE" and stale["id"] == "b2"
    node.refresh_from_db()
    assert node.last_seq == 5


def test_a_hello_starts_the_heartbeat_sequence_again(agent_node):
    """An agent restarted on a clock stepped back since its last run: its seqs (milliseconds since
    the epoch) are below the stored one. Its new connection's hello starts the sequence again, so
    its heartbeats are accepted, and still must increase within the connection."""
    node, token = agent_node

    async def scenario():
        before = _comm(token)
        await before.connect(timeout=10)
        await _hello(before, "h1")
        earlier = await _send(before, {"type": "heartbeat", "id": "b1", "seq": 1_700_000_000_000, "running": []})
        await before.disconnect()
        after = _comm(token)
        await after.connect(timeout=10)
        await _hello(after, "h2")
        behind = await _send(after, {"type": "heartbeat", "id": "b2", "seq": 1_699_999_000_000, "running": []})
        repeat = await _send(after, {"type": "heartbeat", "id": "b3", "seq": 1_699_999_000_000, "running": []})
        await after.disconnect()
        return earlier, behind, repeat

    earlier, behind, repeat = run(scenario)
    assert earlier == {"type": "ack", "id": "b1"}
    assert behind == {"type": "ack", "id": "b2"}
    assert repeat["code"] == "STALE_SEQUENCE"
    node.refresh_from_db()
    assert node.last_seq == 1_699_999_000_000


def test_frames_are_handled_without_a_hop_to_the_shared_sync_thread(agent_node, monkeypatch):
    """Channels closes stale connections before every message by a hop to its one sync thread;
    the agent consumer's database work closes them in its own thread instead."""
    import channels.consumer

    hops = []

    async def counted() -> None:
        hops.append(1)

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    node, token = agent_node

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        replies = [await _send(comm, {"type": "heartbeat", "id": f"b{i}", "seq": i, "running": []})
                   for i in range(1, 4)]
        await comm.disconnect()
        return replies

    assert run(scenario) == [{"type": "ack", "id": f"b{i}"} for i in range(1, 4)]
    assert hops == []
    node.refresh_from_db()
    assert node.last_seq == 3


@pytest.mark.parametrize("raw", [
    "not json", "[1, 2]", json.dumps({"type": "dance", "id": "x"}),
    json.dumps({"type": "heartbeat", "id": "x", "seq": "7", "running": []}),
    json.dumps({"type": "heartbeat", "id": "x", "seq": 7}),
    json.dumps({"type": "heartbeat", "id": "x", "seq": 7, "running": [], "extra": 1}),
    json.dumps({"type": "exited", "id": "x", "allocation": "1", "exit_code": 0, "reason": "bored"}),
    json.dumps({"type": "heartbeat", "seq": 7, "running": []}),
    json.dumps({"type": "heartbeat", "id": "x", "seq": 7, "running": [], "usage": {"pad": "y" * 70000}}),
    json.dumps({"type": "heartbeat", "id": "x", "seq": 2**63, "running": []}),  # past the stored bigint
    json.dumps({"type": "heartbeat", "id": "x", "seq": 2**70, "running": []}),  # past any 64-bit integer
    json.dumps({"type": "exited", "id": "x", "allocation": "1", "exit_code": 2**31, "reason": "failed"}),
    json.dumps({"type": "defer", "id": "x", "allocation": "1", "seconds": -1}),
    '{"type": "checkpoint_progress", "id": "x", "allocation": "1", "percent": NaN}',
    # "²" passes str.isdigit() and fails int(); ids must be ASCII decimal numbers
    json.dumps({"type": "exited", "id": "x", "allocation": "²", "exit_code": 0, "reason": "completed"}),
    json.dumps({"type": "started", "id": "x", "allocation": "１２", "pid": 1}),
    json.dumps({"type": "started", "id": "x", "allocation": "9" * 20, "pid": 1}),  # past a bigint
    json.dumps({"type": "started", "id": "x", "allocation": "0003", "pid": 1}),  # as sent: no leading zero
    json.dumps({"type": "heartbeat", "id": "x", "seq": 7, "running": ["0"]}),
    json.dumps({"type": "heartbeat", "id": "x", "seq": 7, "running": ["²"]}),
    json.dumps({"type": "hello", "id": "x", "agent_version": "1", "capacity": {}, "labels": {},
                "running": [{"allocation": "²"}]}),
    # ids are stored (at most 128 characters); PostgreSQL stores no NUL in any text
    json.dumps({"type": "started", "id": "x" * 129, "allocation": "1", "pid": 1}),
    json.dumps({"type": "started", "id": "a\u0000b", "allocation": "1", "pid": 1}),
    json.dumps({"type": "hello", "id": "x", "agent_version": "1\u0000", "capacity": {}, "labels": {},
                "running": []}),
    json.dumps({"type": "checkpoint_done", "id": "x", "allocation": "1", "ok": False, "error": "\u0000"}),
    json.dumps({"type": ["heartbeat"], "id": "x"}),  # an unhashable type (found by the frame fuzz test)
])
def test_malformed_frames_get_bad_frame_and_keep_the_connection(agent_node, raw):
    node, token = agent_node

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        await comm.send_to(text_data=raw)
        error = json.loads(await comm.receive_from(timeout=5))
        ok = await _send(comm, {"type": "heartbeat", "id": "after", "seq": 1, "running": []})
        await comm.disconnect()
        return error, ok

    error, ok = run(scenario)
    assert error["type"] == "error" and error["code"] == "BAD_FRAME"
    assert ok == {"type": "ack", "id": "after"}
    node.refresh_from_db()
    assert node.last_seq == 1


@pytest.mark.parametrize(("field", "value"), [
    ("labels", {"rack": {"row": {"slot": "1"}}}),  # nested
    ("labels", {"rack": ["a", "b"]}),
    ("labels", {"rack": 7}),
    ("labels", {f"k{i}": "v" for i in range(65)}),  # too many
    ("labels", {"k" * 129: "v"}),
    ("labels", {"": "v"}),
    ("labels", {"rack": "x" * 129}),
    ("capacity", {"gpu": {"count": 8}}),  # nested
    ("capacity", {"gpu": "8"}),
    ("capacity", {"gpu": True}),
    ("capacity", {"gpu": 2**31}),
    ("capacity", {"gpu": -1}),
    ("capacity", {f"r{i}": 1 for i in range(17)}),
])
def test_a_hello_with_deep_or_huge_labels_or_capacity_is_refused_naming_the_field(agent_node, field, value):
    node, token = agent_node
    hello = {"type": "hello", "id": "h1", "agent_version": "9.9", "capacity": {"gpu": 8, "cpu": 64.5},
             "labels": {"rack": "r1"}, "running": []}

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        error = await _send(comm, {**hello, field: value})
        ok = await _send(comm, {"type": "heartbeat", "id": "after", "seq": 1, "running": []})
        await comm.disconnect()
        return error, ok

    error, ok = run(scenario)
    assert error["type"] == "error" and error["code"] == "BAD_FRAME" and error["id"] == "h1"
    assert error["message"].startswith(f"{field}: ")
    assert ok == {"type": "ack", "id": "after"}  # the connection stays
    node.refresh_from_db()
    assert node.agent_version == ""  # the hello changed nothing (it would have stored 9.9)


def test_report_for_another_nodes_allocation_is_refused(agent_node, resource_group, vcluster_hpc, make_allocation):
    node, token = agent_node
    other = Node.objects.create(name="gpu-z", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8)
    theirs = _running_here(make_allocation, vcluster_hpc, other)

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        reply = await _send(comm, {"type": "exited", "id": "e1", "allocation": str(theirs.pk), "exit_code": 0,
                                   "reason": "completed"})
        await comm.disconnect()
        return reply

    assert run(scenario)["code"] == "NOT_ON_THIS_NODE"
    theirs.refresh_from_db()
    assert theirs.state == "running"


def test_started_exited_and_duplicate_ids(agent_node, make_allocation, vcluster_hpc):
    node, token = agent_node
    alloc = _running_here(make_allocation, vcluster_hpc, node)

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        out = [await _send(comm, {"type": "started", "id": "s1", "allocation": str(alloc.pk), "pid": 99})]
        out.append(await _send(comm, {"type": "started", "id": "s0", "allocation": str(alloc.pk), "pid": 0}))
        exited = {"type": "exited", "id": "x1", "allocation": str(alloc.pk), "exit_code": 0, "reason": "completed"}
        out.append(await _send(comm, exited))
        out.append(await _send(comm, exited))  # the same frame again
        out.append(await _send(comm, {**exited, "id": "x2"}))  # a late exit for an ended allocation
        await comm.disconnect()
        return out

    out = run(scenario)
    assert out == [{"type": "ack", "id": i} for i in ("s1", "s0", "x1", "x1", "x2")]
    alloc.refresh_from_db()
    assert alloc.state == "completed"
    # A simulated agent runs no process (pid 0): the history says so instead of naming pid 0.
    assert list(AllocationEvent.objects.filter(allocation=alloc, reason__startswith="started on")
                .order_by("id").values_list("reason", flat=True)) == [
        "started on gpu-a (pid 99)", "started on gpu-a (simulated, no process)"]
    assert AllocationEvent.objects.filter(allocation=alloc, to_state="completed").count() == 1


def test_an_id_repeated_with_other_content_is_refused_and_changes_nothing(agent_node, make_allocation,
                                                                          vcluster_hpc):
    node, token = agent_node
    alloc = _running_here(make_allocation, vcluster_hpc, node)
    started = {"type": "started", "id": "r1", "allocation": str(alloc.pk), "pid": 99}
    exited = {"type": "exited", "id": "r1", "allocation": str(alloc.pk), "exit_code": 0, "reason": "completed"}

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        out = [await _send(comm, started), await _send(comm, exited)]  # the exit reuses the start's id
        out.append(await _send(comm, {**started, "pid": 100}))  # so does another start
        out.append(await _send(comm, started))  # the start itself, resent: acknowledged again
        await comm.disconnect()
        return out

    out = run(scenario)
    assert out[0] == out[3] == {"type": "ack", "id": "r1"}
    for refused in out[1:3]:
        assert refused["type"] == "error" and refused["id"] == "r1" and refused["code"] == "ID_REUSED"
        assert "different frame" in refused["message"]
    alloc.refresh_from_db()
    assert alloc.state == "running" and alloc.exit_code is None
    assert list(AllocationEvent.objects.filter(allocation=alloc, reason__startswith="started on")
                .values_list("reason", flat=True)) == ["started on gpu-a (pid 99)"]


def test_checkpoint_progress_defer_and_done(agent_node, resource_group, vcluster_hpc, make_allocation):
    node, token = agent_node
    low = _running_here(make_allocation, vcluster_hpc, node)
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                           vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    low.refresh_from_db()
    assert low.state == "checkpointing"
    deadline = low.deadline_at

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        out = [await _send(comm, {"type": "checkpoint_progress", "id": "c1", "allocation": str(low.pk),
                                  "percent": 40})]
        out.append(await _send(comm, {"type": "defer", "id": "d1", "allocation": str(low.pk), "seconds": 60}))
        out.append(await _send(comm, {"type": "checkpoint_done", "id": "c2", "allocation": str(low.pk),
                                      "ok": True, "location": "/ckpt/1", "size_bytes": 12}))
        await comm.disconnect()
        return out

    assert [f["type"] for f in run(scenario)] == ["ack", "ack", "ack"]
    low.refresh_from_db()
    assert low.state == "pending" and low.resume_from_checkpoint and low.checkpoint_location == "/ckpt/1"
    assert low.deferred_seconds == 60 and low.checkpoint_progress_at is not None
    assert deadline is not None
    schedule_pass(resource_group.pk)
    high.refresh_from_db()
    assert high.state == "running"


def test_commands_reach_the_agent_through_its_group(agent_node, resource_group, vcluster_hpc, make_allocation):
    node, token = agent_node

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        await _send(comm, {"type": "heartbeat", "id": "b1", "seq": 1, "running": []})
        await database_sync(lambda: make_allocation(state="pending", node_count=1, per_node_gpu=8,
                                                    vcluster=vcluster_hpc, command=["sleep", "1"]))
        await database_sync(lambda: schedule_pass(resource_group.pk))
        frame = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return frame

    frame = run(scenario)
    assert frame["type"] == "start" and frame["command"] == ["sleep", "1"]
    assert frame["resume_from_checkpoint"] is False


def _one_connection_then_another(token: str) -> tuple[dict, dict]:
    """What the first connection of a node gets once a second is made, and the second's answer to
    a heartbeat."""
    async def scenario():
        first = _comm(token)
        await first.connect(timeout=10)
        second = _comm(token)
        await second.connect(timeout=10)
        out = await first.receive_output(timeout=5)
        ok = await _send(second, {"type": "heartbeat", "id": "b", "seq": 1, "running": []})
        await second.disconnect()
        return out, ok

    return run(scenario)


def test_second_connection_replaces_the_first_with_4409(agent_node):
    out, ok = _one_connection_then_another(agent_node[1])
    assert out == {"type": "websocket.close", "code": 4409}
    assert ok["type"] == "ack"


def test_the_newer_connection_stays_whatever_the_servers_clock_says(agent_node, monkeypatch):
    """The server's clock stepped back between two connections of one node (NTP, or another host
    whose clock is behind): the newer connection is still the one that stays. Before, the older
    one, dead or not, sent the live agent away for minutes."""
    node, token = agent_node
    clock = iter([2_000_000_000_000_000_000, 1_000_000_000_000_000_000])
    monkeypatch.setattr(time, "time_ns", lambda: next(clock, 0))
    out, ok = _one_connection_then_another(token)
    assert out == {"type": "websocket.close", "code": 4409} and ok["type"] == "ack"
    assert Node.objects.get(pk=node.pk).agent_connections == 2


# Two authentications at once write the node's row together: PostgreSQL orders them, while the
# tests' in-memory SQLite (shared cache) answers the second "table is locked" at once, with no wait.
@pytest.mark.postgres
def test_of_two_connections_made_at_once_only_one_stays(agent_node, monkeypatch):
    """Two connections of one node authenticated together (two agents started with its token):
    whatever the channel layer's latency, one of them is closed with 4409 and one stays."""
    node, token = agent_node
    layer_type = type(get_channel_layer())
    group_add = layer_type.group_add

    async def slow_group_add(self, group, channel):  # a joining that takes a while (Redis)
        await asyncio.sleep(0.2)
        await group_add(self, group, channel)

    monkeypatch.setattr(layer_type, "group_add", slow_group_add)

    async def scenario():
        comms = [_comm(token), _comm(token)]
        await asyncio.gather(*(c.connect(timeout=10) for c in comms))
        # The first to hear anything is the one closed; however late that comes on a loaded
        # machine (up to 10 s), the other must then still answer.
        closed = None
        for _ in range(100):
            for i, comm in enumerate(comms):
                if not await comm.receive_nothing(timeout=0.05):
                    closed = i
            if closed is not None:
                break
        outcomes = []
        for i, comm in enumerate(comms):
            if i != closed and await comm.receive_nothing(timeout=1):  # still open: it answers
                outcomes.append(await _send(comm, {"type": "heartbeat", "id": f"hb{i}", "seq": 1 + i,
                                                   "running": []}))
            else:
                outcomes.append(await comm.receive_output(timeout=5))
        for comm in comms:
            await comm.disconnect()
        return outcomes

    outcomes = run(scenario)
    assert sorted(o["type"] for o in outcomes) == ["ack", "websocket.close"]
    assert {"type": "websocket.close", "code": 4409} in outcomes


def test_flooding_agent_is_disconnected_with_4429(agent_node):
    node, token = agent_node

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        for _ in range(260):
            await comm.send_to(text_data="x")
        while True:
            out = await comm.receive_output(timeout=5)
            if out["type"] == "websocket.close":
                return out

    assert run(scenario) == {"type": "websocket.close", "code": 4429}


def test_agent_token_command_prints_the_token_last(node_gpu_a):
    import io

    from django.core.management import call_command

    from tests.nodes.conftest import authenticated

    out = io.StringIO()
    call_command("agent_token", "gpu-a", stdout=out, stderr=io.StringIO())
    assert authenticated(out.getvalue().strip().splitlines()[-1]) == node_gpu_a


async def database_sync(fn):
    from channels.db import database_sync_to_async

    return await database_sync_to_async(fn)()


def test_late_report_is_accepted_only_from_a_node_the_work_ran_on(agent_node, resource_group, vcluster_hpc,
                                                                   make_allocation):
    node, token = agent_node
    similar = Node.objects.create(name="gpu-a1", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8)
    elsewhere = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    from scheduling.actions.starts import allocation_place

    allocation_place(allocation=elsewhere, node_ids={"gpu-a1": similar.pk}, nodes=["gpu-a1"], borrowed=[])

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        reply = await _send(comm, {"type": "exited", "id": "z1", "allocation": str(elsewhere.pk),
                                   "exit_code": 0, "reason": "completed"})
        await comm.disconnect()
        return reply

    assert run(scenario)["code"] == "NOT_ON_THIS_NODE"
    elsewhere.refresh_from_db()
    assert elsewhere.state == "running" and elsewhere.ran_on == ["gpu-a1"]


def test_the_copy_queued_for_lost_work_takes_no_report_from_the_node_that_lost_it(agent_node, make_allocation,
                                                                                  vcluster_hpc):
    """The copy has run nowhere: the node of the lost original may not report about it."""
    node, token = agent_node
    lost = _lost_here(make_allocation, vcluster_hpc, node)

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        await _hello(comm)
        copy = await database_sync_to_async(Allocation.objects.get)(requeued_from=lost)
        out = [await _send(comm, {"type": "started", "id": "s1", "allocation": str(copy.pk), "pid": 7}),
               await _send(comm, {"type": "exited", "id": "x1", "allocation": str(copy.pk), "exit_code": 0,
                                  "reason": "completed"})]
        await comm.disconnect()
        return out

    assert [f.get("code") for f in run(scenario)] == ["NOT_ON_THIS_NODE", "NOT_ON_THIS_NODE"]
    copy = Allocation.objects.get(requeued_from=lost)
    assert (copy.state, copy.ran_on) == ("pending", [])
    assert not AllocationEvent.objects.filter(allocation=copy, reason__startswith="started on").exists()


def test_a_revoked_token_s_connection_is_closed_with_4401_and_the_new_token_connects(agent_node, operator):
    """An operator issues a new token (the console or the API): the agent still connected with the
    old one is cut off at once, and the new one works."""
    from nodes.actions import agent_token_replace

    node, token = agent_node

    async def scenario():
        old = _comm(token)
        await old.connect(timeout=10)
        assert (await _send(old, {"type": "heartbeat", "id": "a", "seq": 1, "running": []}))["type"] == "ack"
        fresh = await database_sync(lambda: agent_token_replace(node=node, actor=operator, reason="leaked"))
        closed = await old.receive_output(timeout=5)
        new = _comm(fresh)
        connected, _ = await new.connect(timeout=10)
        ok = await _send(new, {"type": "heartbeat", "id": "b", "seq": 2, "running": []})
        await new.disconnect()
        return closed, connected, ok

    closed, connected, ok = run(scenario)
    assert closed == {"type": "websocket.close", "code": 4401}
    assert connected and ok["type"] == "ack"


def test_a_demo_restart_closes_only_its_own_agents_connections(agent_node):
    """``run_agent --simulate-all`` revokes only the tokens it gave simulated agents: an agent
    connected with a token issued by hand is not told its token was revoked (4401, on which it
    stops for good), and the previous demo's simulated agent is."""
    from nodes.actions import agent_token_simulated

    node, by_hand = agent_node

    async def scenario():
        first = await database_sync(lambda: agent_token_simulated(node=node))
        simulated = _comm(first)
        await simulated.connect()
        real = _comm(by_hand)
        await real.connect()  # the newest connection of the node: the simulated one is replaced
        replaced = await simulated.receive_output(timeout=5)
        await database_sync(lambda: agent_token_simulated(node=node))  # the demo starts again
        await real.receive_nothing(timeout=0.5)
        ok = await _send(real, {"type": "heartbeat", "id": "a", "seq": 1, "running": []})
        await real.disconnect()
        return replaced, ok

    replaced, ok = run(scenario)
    assert replaced == {"type": "websocket.close", "code": 4409}
    assert ok == {"type": "ack", "id": "a"}


def test_a_demo_restart_closes_the_previous_demo_s_agent(agent_node):
    from nodes.actions import agent_token_simulated

    node, _ = agent_node

    async def scenario():
        first = await database_sync(lambda: agent_token_simulated(node=node))
        simulated = _comm(first)
        await simulated.connect()
        await database_sync(lambda: agent_token_simulated(node=node))
        return await simulated.receive_output(timeout=5)

    assert run(scenario) == {"type": "websocket.close", "code": 4401}


def test_frames_still_queued_when_the_token_is_revoked_change_nothing(agent_node):
    """Frames an agent sent before its token's revocation reached it arrive after the connection
    was closed (they were in flight, or queued behind the close): none of them is applied. (Frames
    handled before the revocation reached the connection were, rightly, applied.)"""
    from nodes.actions import agent_token_revoke

    node, token = agent_node

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        assert (await _send(comm, {"type": "heartbeat", "id": "a", "seq": 1, "running": []}))["type"] == "ack"
        await database_sync(lambda: agent_token_revoke(node=node))
        closed = await comm.receive_output(timeout=5)
        for i in range(3):  # still in flight when the server closed
            await comm.send_to(text_data=json.dumps({"type": "hello", "id": f"h{i}", "agent_version": "after",
                                                     "capacity": {}, "labels": {}, "running": []}))
        await comm.send_to(text_data=json.dumps({"type": "heartbeat", "id": "b", "seq": 2, "running": []}))
        await comm.receive_nothing(timeout=0.5)  # what the frames would have answered
        await comm.disconnect()
        return closed

    assert run(scenario) == {"type": "websocket.close", "code": 4401}
    node.refresh_from_db()
    assert node.agent_version == "" and node.last_seq == 1


def test_a_late_exit_corrects_work_its_agent_s_hello_declared_lost(agent_node, make_allocation, vcluster_hpc):
    """An agent whose hello comes before its buffered reports: hello fails the work it no longer
    runs and requeues a copy; the exit that follows says it completed. The record is corrected
    (completed, not failed) and the copy, still pending, is cancelled."""
    node, token = agent_node
    job = _lost_here(make_allocation, vcluster_hpc, node)

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        await comm.send_to(text_data=json.dumps({"type": "hello", "id": "h1", "agent_version": "1.0",
                                                 "capacity": {}, "labels": {}, "running": []}))
        hello = [json.loads(await comm.receive_from(timeout=5)) for _ in range(2)]
        lost = await database_sync(lambda: Allocation.objects.get(pk=job.pk).state)
        exited = await _send(comm, {"type": "exited", "id": "x1", "allocation": str(job.pk), "exit_code": 0,
                                    "reason": "completed"})
        await comm.disconnect()
        return hello, lost, exited

    hello, lost, exited = run(scenario)
    assert [f["type"] for f in hello] == ["welcome", "ack"] and lost == "failed"
    assert exited == {"type": "ack", "id": "x1"}
    job.refresh_from_db()
    assert (job.state, job.exit_code) == ("completed", 0)
    copy = Allocation.objects.get(requeued_from=job)
    assert copy.state == "cancelled"
    assert list(AllocationEvent.objects.filter(allocation=job).exclude(from_state="").order_by("id")
                .values_list("from_state", "to_state")) == [("running", "failed"), ("failed", "completed")]


def test_a_late_failed_exit_keeps_the_copy_only_when_the_policy_requeues_failures(agent_node, make_allocation,
                                                                                vcluster_hpc):
    node, token = agent_node
    started = _silent_and_drained(node)
    always = _running_here(make_allocation, vcluster_hpc, node, requeue_policy="always", started_at=started,
                           per_node_gpu=4)
    on_loss = _running_here(make_allocation, vcluster_hpc, node, requeue_policy="on_node_failure",
                            started_at=started, per_node_gpu=4)

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        await _hello(comm)
        out = [await _send(comm, {"type": "exited", "id": f"x{a.pk}", "allocation": str(a.pk), "exit_code": 3,
                                  "reason": "failed"}) for a in (always, on_loss)]
        await comm.disconnect()
        return out

    assert [f["type"] for f in run(scenario)] == ["ack", "ack"]
    for alloc, copy_state in ((always, "pending"), (on_loss, "cancelled")):
        alloc.refresh_from_db()
        assert (alloc.state, alloc.exit_code) == ("failed", 3)
        assert Allocation.objects.get(requeued_from=alloc).state == copy_state


@pytest.mark.parametrize("state", ["suspended", "pending"])
def test_a_late_start_of_work_no_longer_placed_writes_nothing_to_its_history(agent_node, make_allocation,
                                                                             vcluster_hpc, state):
    """Work suspended or requeued since its run here: the agent's late ``started`` is acknowledged
    (it is no error of the agent's) and its history does not say it started."""
    node, token = agent_node
    node.state = NodeState.DRAINING  # so that no pass starts it again meanwhile
    node.save()
    alloc = make_allocation(state=state, node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                            vcluster=vcluster_hpc, ran_on=[node.name])
    before = AllocationEvent.objects.filter(allocation=alloc).count()

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        reply = await _send(comm, {"type": "started", "id": "s1", "allocation": str(alloc.pk), "pid": 7})
        await comm.disconnect()
        return reply

    assert run(scenario) == {"type": "ack", "id": "s1"}
    alloc.refresh_from_db()
    assert alloc.state == state
    assert AllocationEvent.objects.filter(allocation=alloc).count() == before


def test_a_report_with_a_key_given_twice_is_refused_and_changes_nothing(agent_node, make_allocation, vcluster_hpc):
    """Read as its last copy, ``"exit_code": 1, ... "exit_code": 0`` would complete work whose frame,
    as anyone reads it, says it failed first: the frame is refused instead, naming the key."""
    node, token = agent_node
    alloc = _running_here(make_allocation, vcluster_hpc, node)
    text = (f'{{"type": "exited", "id": "e1", "allocation": "{alloc.pk}", "exit_code": 1, "reason": "failed", '
            '"exit_code": 0, "reason": "completed"}')

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        await comm.send_to(text_data=text)
        error = json.loads(await comm.receive_from(timeout=5))
        ok = await _send(comm, {"type": "heartbeat", "id": "after", "seq": 1, "running": []})
        await comm.disconnect()
        return error, ok

    error, ok = run(scenario)
    assert (error["type"], error["code"], error["id"]) == ("error", "BAD_FRAME", "e1")
    assert "'exit_code' is given more than once" in error["message"]
    assert ok == {"type": "ack", "id": "after"}  # the connection stays
    alloc.refresh_from_db()
    assert alloc.state == "running"


@pytest.mark.parametrize("frame", [
    {"type": "checkpoint_done", "ok": True, "location": "s3://elsewhere/ckpt"},
    {"type": "checkpoint_done", "ok": False, "error": "no"},
    {"type": "defer", "seconds": 300},
    {"type": "checkpoint_progress", "percent": 50},
    {"type": "started", "pid": 66},
])
def test_a_node_the_work_has_left_reports_nothing_but_its_exit(agent_node, resource_group, vcluster_hpc,
                                                                 make_allocation, frame):
    """Work of two nodes checkpoints on gpu-b; gpu-a, whose process completed, was freed. gpu-a's
    agent is acknowledged (it named work that ran there) but cannot end, fail, defer or start the
    work now on another node: before, it could suspend it with a location of its choosing."""
    node, token = agent_node
    other = Node.objects.create(name="gpu-b", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8,
                                state="ready")
    deadline = timezone.now() + timezone.timedelta(minutes=5)
    alloc = make_allocation(state="checkpointing", node_count=2, per_node_gpu=8, preemption_class=1,
                            checkpoint="auto", vcluster=vcluster_hpc, started_at=timezone.now(),
                            ran_on=[node.name, other.name], run=1, deadline_at=deadline,
                            checkpoint_started_at=timezone.now())
    Placement.objects.create(allocation=alloc, node=other, gpu=8)
    before = AllocationEvent.objects.filter(allocation=alloc).count()

    async def scenario():
        comm = _comm(token)
        await comm.connect(timeout=10)
        reply = await _send(comm, {**frame, "id": "r1", "allocation": str(alloc.pk)})
        await comm.disconnect()
        return reply

    assert run(scenario) == {"type": "ack", "id": "r1"}
    alloc.refresh_from_db()
    assert (alloc.state, alloc.checkpoint_location, alloc.deadline_at) == ("checkpointing", "", deadline)
    assert alloc.checkpoint_progress_at is None
    assert AllocationEvent.objects.filter(allocation=alloc).count() == before


def test_a_deleted_node_s_agent_is_closed_and_a_node_made_again_under_its_name_keeps_its_own(
        agent_node, resource_group, vcluster_hpc):
    """The node is deleted and made again under its name (a host re-provisioned), with a token for
    its new agent. The deleted node's connection is closed with 4401 (its tokens went with it) and
    the new agent's stays, and hears its node's commands. Before, the old connection stayed and,
    counted the newer, sent the new agent away with 4409."""
    node, old_token = agent_node
    Node.objects.filter(pk=node.pk).update(agent_connections=5)

    def made_again() -> str:
        Node.objects.filter(pk=node.pk).delete()
        again = Node.objects.create(name=node.name, resource_group=resource_group, vcluster=vcluster_hpc, gpu=8,
                                    state="ready")
        return agent_token_issue(node=again)

    async def scenario():
        old = _comm(old_token)
        assert (await old.connect(timeout=10))[0]
        new = _comm(await database_sync_to_async(made_again)())
        closed = await old.receive_output(timeout=5)  # (before the new agent comes: no race for the name)
        assert (await new.connect(timeout=10))[0]
        await get_channel_layer().group_send(f"agent.{node.name}", {"type": "agent.command",
                                                                    "frame": {"type": "kill", "allocation": "7"}})
        heard = await new.receive_output(timeout=5)
        await new.disconnect()
        return closed, heard

    closed, heard = run(scenario)
    assert closed == {"type": "websocket.close", "code": 4401}
    assert heard["type"] == "websocket.send" and json.loads(heard["text"]) == {"type": "kill", "allocation": "7"}


@pytest.mark.parametrize("how", ["revoked", "deleted"])
def test_a_token_revoked_or_deleted_in_the_admin_closes_its_connection(agent_node, how):
    """The admin saves or deletes the token row (not through the token actions): the connection it
    authenticated is closed with 4401 all the same, and one made with another token of the node stays.
    Before, both stayed open."""
    node, token = agent_node
    other = agent_token_issue(node=node)
    spare = agent_token_issue(node=node)

    def take_away(which: str) -> None:
        record = AgentToken.lookup(which)
        if how == "revoked":
            record.revoked_at = timezone.now()
            record.save()
        else:
            record.delete()

    async def scenario():
        kept = _comm(other)
        assert (await kept.connect(timeout=10))[0]
        await database_sync_to_async(take_away)(spare)
        stays = await kept.receive_nothing(timeout=0.5)
        await database_sync_to_async(take_away)(other)
        return stays, await kept.receive_output(timeout=5)

    assert run(scenario) == (True, {"type": "websocket.close", "code": 4401})
