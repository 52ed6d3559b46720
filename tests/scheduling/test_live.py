"""/ws/live/: session authentication, who hears what, and sends only to watched groups."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from lattice_site.asgi import application
from scheduling.consumers import COALESCE_S
from scheduling.dispatch import event_on_commit, has_subscribers
from scheduling.models import Membership

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_subscribers():
    """Subscriber counts live in Redis when it is the channel layer: start each test from zero."""
    from scheduling import dispatch

    dispatch._local_subscribers.clear()
    client = dispatch._redis()
    if client is not None:
        for key in client.scan_iter("lattice:subscribers:*"):
            client.delete(key)


def _comm(client) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode() if "sessionid" in client.cookies else b""
    return WebsocketCommunicator(application, "/ws/live/", headers=[(b"cookie", cookie),
                                                                    (b"origin", b"http://127.0.0.1")])


def _operator_and_member(client, operator, django_user_model):
    """Browsers logged in as the operator and as alice (physics); returns a coroutine factory
    that connects both sockets and reads their greeting."""
    from django.test import Client

    client.force_login(operator)
    alice = Client()
    alice.force_login(django_user_model.objects.get(username="alice"))

    async def connected() -> tuple[WebsocketCommunicator, WebsocketCommunicator]:
        ops, member = _comm(client), _comm(alice)
        assert (await ops.connect(timeout=10))[0] and (await member.connect(timeout=10))[0]
        await ops.receive_json_from(timeout=5)
        await member.receive_json_from(timeout=5)
        return ops, member

    return connected


def _delivered(connected, send, n_ops: int, n_member: int) -> tuple[list, list]:
    """Connect the operator's and the member's sockets, run ``send`` (database work, in a thread)
    and read what each received: ``n_ops`` and ``n_member`` events, and the member nothing more."""
    async def scenario():
        ops, member = await connected()
        await database_sync_to_async(send)()
        got_ops = await _events(ops, n_ops)
        got_member = await _events(member, n_member)
        assert await member.receive_nothing(timeout=0.3)
        await ops.disconnect()
        await member.disconnect()
        return got_ops, got_member

    return async_to_sync(scenario)()


def test_anonymous_browser_is_refused(client):
    async def scenario():
        comm = _comm(client)
        connected, code = await comm.connect(timeout=10)
        return connected, code

    assert async_to_sync(scenario)() == (False, 4401)


def test_operator_hears_every_event_and_member_only_its_tenant(client, operator, tenant_physics, tenant_chemistry,
                                                               django_user_model):
    def send():
        event_on_commit("x", {"n": 1}, tenant_chemistry.pk)
        event_on_commit("y", {"n": 2}, tenant_physics.pk)

    got_ops, got_member = _delivered(_operator_and_member(client, operator, django_user_model), send, 2, 1)
    assert [e["kind"] for e in got_ops] == ["x", "y"]
    assert got_member == [{"kind": "y", "n": 2}]


async def _events(comm: WebsocketCommunicator, count: int) -> list[dict]:
    """Read frames until ``count`` events have arrived; each frame is a coalesced list."""
    got: list[dict] = []
    while len(got) < count:
        frame = await comm.receive_json_from(timeout=5)
        assert frame["kind"] == "events"
        got.extend(frame["events"])
    return got


def test_a_burst_is_coalesced_into_few_frames_in_order(client, operator):
    client.force_login(operator)

    async def scenario():
        ops = _comm(client)
        assert (await ops.connect(timeout=10))[0]
        await ops.receive_json_from(timeout=5)  # hello

        def burst():
            for n in range(40):
                event_on_commit("state", {"n": n}, None)

        loop = asyncio.get_running_loop()
        began = loop.time()
        await database_sync_to_async(burst)()
        frames, events = 0, []
        while len(events) < 40:
            frame = await ops.receive_json_from(timeout=5)
            frames += 1
            events.extend(frame["events"])
        took = loop.time() - began
        assert await ops.receive_nothing(timeout=0.2)
        await ops.disconnect()
        return frames, [e["n"] for e in events], took

    frames, order, took = async_to_sync(scenario)()
    assert order == list(range(40))
    # At most one frame per COALESCE_S however slow the machine is, so fewer frames than events
    # (the burst's own duration, which a busy machine stretches, bounds how many there may be).
    assert frames <= 2 + took / COALESCE_S and frames < 40, f"40 events took {frames} frames in {took:.3f} s"


def test_events_go_only_to_groups_someone_watches(db):
    layer = get_channel_layer()

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("ops", channel)  # in the group, but not a counted subscriber
        await database_sync_to_async(lambda: event_on_commit("z", {}, None))()
        import asyncio

        try:
            await asyncio.wait_for(layer.receive(channel), timeout=0.3)
            return True
        except TimeoutError:
            return False
        finally:
            await layer.group_discard("ops", channel)

    assert not has_subscribers("ops")
    assert async_to_sync(scenario)() is False


def test_events_of_one_commit_go_out_together_in_order_each_to_its_audience(client, operator, tenant_physics,
                                                                           tenant_chemistry, django_user_model):
    from scheduling.dispatch import events_on_commit

    def send():
        events_on_commit([("a", {"n": 1}, tenant_physics.pk), ("b", {"n": 2}, tenant_chemistry.pk),
                          ("c", {"n": 3}, None), ("d", {"n": 4}, tenant_physics.pk)])

    got_ops, got_member = _delivered(_operator_and_member(client, operator, django_user_model), send, 4, 2)
    assert [e["kind"] for e in got_ops] == ["a", "b", "c", "d"]
    assert got_member == [{"kind": "a", "n": 1}, {"kind": "d", "n": 4}]


def test_a_pass_announces_placements_once_per_tenant_to_each_audience(client, operator, resource_group, vcluster_hpc,
                                                                     two_nodes, make_allocation, tenant_physics,
                                                                     tenant_chemistry, django_user_model):
    from django.test import override_settings

    from scheduling.passes.run import schedule_pass

    bob = tenant_chemistry.memberships.first().user
    mine = [make_allocation(state="pending", vcluster=vcluster_hpc, per_node_gpu=2).pk for _ in range(2)]
    theirs = make_allocation(state="pending", vcluster=vcluster_hpc, per_node_gpu=2, tenant=tenant_chemistry,
                             user=bob).pk

    def place():
        with override_settings(CELERY_TASK_ALWAYS_EAGER=True):  # no follow-up pass queued
            assert schedule_pass(resource_group.pk).placed == 3

    got_ops, got_member = _delivered(_operator_and_member(client, operator, django_user_model), place, 2, 1)
    placed = {tuple(e["allocations"]) for e in got_ops if e["kind"] == "allocations.placed"}
    assert placed == {tuple(sorted(mine)), (theirs,)}
    # Each with its jobs' group, tenant and size in words; a member only ever reads its own tenant's.
    size = {"group": "rg-main", "nodes": 1, "gpus": 2}
    assert got_member == [{"kind": "allocations.placed", "allocations": sorted(mine),
                           "jobs": {str(pk): {"tenant": "physics", **size} for pk in sorted(mine)}}]
    ops_theirs = next(e for e in got_ops if e["allocations"] == [theirs])
    assert ops_theirs["jobs"] == {str(theirs): {"tenant": "chemistry", **size}}


def test_a_frame_that_is_not_json_leaves_the_feed_open(client, operator):
    client.force_login(operator)

    async def scenario() -> bool:
        comm = _comm(client)
        assert (await comm.connect(timeout=10))[0]
        await comm.receive_json_from(timeout=5)  # hello
        await comm.send_to(text_data="not json{")
        await comm.send_to(bytes_data=b"\xff\x00")
        await comm.receive_nothing(timeout=0.5)
        still_open = not comm.future.done()
        await comm.disconnect()
        return still_open

    assert async_to_sync(scenario)()


def test_a_member_removed_from_its_tenant_stops_hearing_it(client, tenant_physics, django_user_model):
    client.force_login(django_user_model.objects.get(username="alice"))

    def remove_and_send():
        Membership.objects.filter(user__username="alice", tenant=tenant_physics).delete()
        event_on_commit("y", {"n": 2}, tenant_physics.pk)

    async def scenario() -> bool:
        comm = _comm(client)
        assert (await comm.connect(timeout=10))[0]
        await comm.receive_json_from(timeout=5)  # hello
        await database_sync_to_async(remove_and_send)()
        heard_nothing = await comm.receive_nothing(timeout=1)
        await comm.disconnect()
        return heard_nothing

    assert async_to_sync(scenario)()


def _closed_after(client, tenant_physics, change) -> dict:
    """Connect alice's socket, run ``change`` (in a thread), send one event of her tenant: what
    the socket gets next."""
    async def scenario() -> dict:
        comm = _comm(client)
        assert (await comm.connect(timeout=10))[0]
        await comm.receive_json_from(timeout=5)  # hello
        await database_sync_to_async(change)()
        await database_sync_to_async(event_on_commit)("y", {"n": 2}, tenant_physics.pk)
        return await comm.receive_output(timeout=5)

    return async_to_sync(scenario)()


def test_a_logout_closes_that_sessions_feed(client, tenant_physics, django_user_model):
    client.force_login(django_user_model.objects.get(username="alice"))
    assert _closed_after(client, tenant_physics, client.logout) == {"type": "websocket.close", "code": 4401}


def test_a_deactivated_user_stops_hearing_the_feed(client, tenant_physics, django_user_model):
    alice = django_user_model.objects.get(username="alice")
    client.force_login(alice)

    def deactivate():
        alice.is_active = False
        alice.save()

    assert _closed_after(client, tenant_physics, deactivate) == {"type": "websocket.close", "code": 4401}


def test_a_member_still_hears_its_tenant_after_logging_in_elsewhere(client, tenant_physics, django_user_model):
    from django.test import Client

    alice = django_user_model.objects.get(username="alice")
    client.force_login(alice)
    got = _closed_after(client, tenant_physics, lambda: Client().login(username="alice", password="pw-alice-123"))
    assert got["type"] == "websocket.send" and '"events"' in got["text"]


def test_a_deleted_operator_stops_hearing_the_feed(client, operator, django_user_model):
    """An operator belongs to no tenant, so no membership's deletion tells its sockets: the user's own
    deletion does. Before, the feed went on for up to RECHECK_S after it."""
    client.force_login(operator)

    async def scenario() -> dict:
        comm = _comm(client)
        assert (await comm.connect(timeout=10))[0]
        await comm.receive_json_from(timeout=5)  # hello
        await database_sync_to_async(django_user_model.objects.filter(pk=operator.pk).delete)()
        await database_sync_to_async(event_on_commit)("y", {"n": 2}, None)  # an operators' event
        return await comm.receive_output(timeout=5)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}
