"""Node liveness and the operators' node endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from nodes.actions import node_liveness_sweep
from nodes.models import Node
from scheduling.models import Allocation, Placement, PolicyChange
from tests.nodes.conftest import authenticated

pytestmark = pytest.mark.django_db


def test_silent_node_degrades_then_goes_down_and_its_work_is_requeued(node_gpu_a, make_allocation, vcluster_hpc):
    now = timezone.now()
    node_gpu_a.last_heartbeat_at = now
    node_gpu_a.save()
    keep = make_allocation(state="running", per_node_gpu=8, vcluster=vcluster_hpc, requeue_policy="on_node_failure")
    drop = make_allocation(state="running", per_node_gpu=0, vcluster=vcluster_hpc, requeue_policy="never")
    for a in (keep, drop):
        Placement.objects.create(allocation=a, node=node_gpu_a, gpu=a.per_node_gpu)

    assert node_liveness_sweep(now=now + timedelta(seconds=29)) == {"degraded": 0, "down": 0}
    assert node_liveness_sweep(now=now + timedelta(seconds=31)) == {"degraded": 1, "down": 0}
    node_gpu_a.refresh_from_db()
    assert node_gpu_a.state == "degraded"
    assert Allocation.objects.get(pk=keep.pk).state == "running"  # degraded: work keeps running
    assert node_liveness_sweep(now=now + timedelta(seconds=91)) == {"degraded": 0, "down": 1}
    node_gpu_a.refresh_from_db()
    assert node_gpu_a.state == "down"
    assert Allocation.objects.get(pk=keep.pk).state == "failed"
    assert Allocation.objects.filter(requeued_from=keep, state="pending").count() == 1
    assert not Allocation.objects.filter(requeued_from=drop).exists()
    assert not Placement.objects.filter(node=node_gpu_a).exists()
    assert node_liveness_sweep(now=now + timedelta(seconds=200)) == {"degraded": 0, "down": 0}


def test_heartbeat_before_down_restores_ready_without_disruption(node_gpu_a):
    from nodes.actions import node_heartbeat
    from nodes.protocol import Heartbeat

    now = timezone.now()
    node_gpu_a.last_heartbeat_at = now - timedelta(seconds=40)
    node_gpu_a.save()
    node_liveness_sweep(now=now)
    node_heartbeat(node=node_gpu_a, frame=Heartbeat(id="h", seq=1, running=[]), now=now)
    node_gpu_a.refresh_from_db()
    assert node_gpu_a.state == "ready"


def test_operators_drain_undrain_and_issue_tokens_others_cannot(client, operator, node_gpu_a, tenant_physics,
                                                               django_user_model):
    client.force_login(django_user_model.objects.get(username="alice"))
    assert client.post("/api/v1/nodes/gpu-a/drain/", {"reason": "x"}).status_code == 403
    client.force_login(operator)
    assert client.post("/api/v1/nodes/gpu-a/drain/", {}).status_code == 400
    assert client.post("/api/v1/nodes/gpu-a/drain/", {"reason": "firmware"}).json()["state"] == "draining"
    Node.objects.filter(name="gpu-a").update(last_heartbeat_at=timezone.now())  # its agent is there
    assert client.post("/api/v1/nodes/gpu-a/undrain/", {"reason": "done"}).json()["state"] == "ready"
    assert list(PolicyChange.objects.order_by("id").values_list("action", "reason")) == [
        ("drain", "firmware"), ("undrain", "done")]
    token = client.post("/api/v1/nodes/gpu-a/agent-token/").json()["token"]
    assert authenticated(token) == Node.objects.get(name="gpu-a")
    again = client.post("/api/v1/nodes/gpu-a/agent-token/", {"reason": "reimaged"}).json()["token"]
    assert authenticated(token) is None and authenticated(again) is not None
    assert list(PolicyChange.objects.filter(action="agent_token").order_by("id").values_list("reason", "actor")) == [
        ("", operator.pk), ("reimaged", operator.pk)]  # each issue audited, the token itself never


def test_batched_heartbeats_are_judged_in_arrival_order(node_gpu_a, resource_group):
    from nodes.heartbeats import persist

    other = Node.objects.create(name="gpu-b", resource_group=resource_group, gpu=8, state="degraded")
    now = timezone.now()
    batch = [(node_gpu_a.pk, 5), (other.pk, 3), (node_gpu_a.pk, 5), (node_gpu_a.pk, 4), (node_gpu_a.pk, 9)]
    assert persist(batch, now) == [True, True, False, False, True]
    node_gpu_a.refresh_from_db()
    other.refresh_from_db()
    assert (node_gpu_a.last_seq, other.last_seq, other.state) == (9, 3, "ready")
    assert persist([(other.pk, 3)], now) == [False]


def test_a_batch_never_writes_a_stale_node_nor_one_that_is_gone(node_gpu_a, resource_group):
    from nodes.heartbeats import persist

    draining = Node.objects.create(name="gpu-b", resource_group=resource_group, gpu=8, state="draining")
    gone = Node.objects.create(name="gpu-c", resource_group=resource_group, gpu=8, state="ready")
    gone_id = gone.pk
    gone.delete()
    earlier = timezone.now() - timedelta(minutes=1)
    assert persist([(node_gpu_a.pk, 7), (draining.pk, 2)], earlier) == [True, True]
    now = timezone.now()
    assert persist([(node_gpu_a.pk, 6), (gone_id, 1), (draining.pk, 3), (node_gpu_a.pk, 7)], now) == [
        False, False, True, False]
    node_gpu_a.refresh_from_db()
    draining.refresh_from_db()
    assert (node_gpu_a.last_seq, node_gpu_a.last_heartbeat_at) == (7, earlier)  # every heartbeat stale
    assert (draining.last_seq, draining.last_heartbeat_at, draining.state) == (3, now, "draining")


def test_operators_list_nodes_by_name_across_pages(client, operator, resource_group):
    """The node list pages by name (nodes have no creation time to order by)."""
    from nodes.api import NodeViewSet

    names = [f"n-{i:03d}" for i in range(NodeViewSet.pagination_class.page_size + 7)]
    for name in reversed(names):
        Node.objects.create(name=name, resource_group=resource_group, gpu=1)
    client.force_login(operator)
    seen, url = [], "/api/v1/nodes/"
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        seen += [row["name"] for row in body["results"]]
        url = body["next"]
    assert seen == names


def test_the_periodic_sweep_forgets_frame_ids_past_the_retry_window(node_gpu_a, resource_group):
    """Processed frame ids serve retries of the same frame; older ones are pruned, newer kept."""
    from nodes.actions import FRAME_ID_RETENTION
    from nodes.models import ProcessedFrame
    from nodes.tasks import node_liveness

    other = Node.objects.create(name="gpu-b", resource_group=resource_group, gpu=8)
    now = timezone.now()
    ages = {"old-a": FRAME_ID_RETENTION + timedelta(minutes=1), "new-a": FRAME_ID_RETENTION - timedelta(minutes=5),
            "old-b": FRAME_ID_RETENTION * 3, "new-b": timedelta(0)}
    for frame_id, age in ages.items():
        node = node_gpu_a if frame_id.endswith("a") else other
        created = ProcessedFrame.objects.create(node=node, frame_id=frame_id)
        ProcessedFrame.objects.filter(pk=created.pk).update(created_at=now - age)
    node_liveness()
    assert sorted(ProcessedFrame.objects.values_list("frame_id", flat=True)) == ["new-a", "new-b"]


def test_a_drain_survives_silence_and_return(client, operator, node_gpu_a, make_allocation, vcluster_hpc):
    """The operator's drain stays through the node's silence (its work is still handled as lost
    once it would be Down) and through its return; only an audited undrain ends it."""
    from nodes.actions import node_heartbeat, node_hello
    from nodes.protocol import Heartbeat, Hello

    client.force_login(operator)
    assert client.post("/api/v1/nodes/gpu-a/drain/", {"reason": "firmware"}).status_code == 200
    now = timezone.now()
    Node.objects.filter(pk=node_gpu_a.pk).update(last_heartbeat_at=now)
    job = make_allocation(state="running", per_node_gpu=8, vcluster=vcluster_hpc, requeue_policy="on_node_failure")
    Placement.objects.create(allocation=job, node=node_gpu_a, gpu=8)

    node_liveness_sweep(now=now + timedelta(seconds=31))
    assert Node.objects.get(pk=node_gpu_a.pk).state == "draining"
    node_liveness_sweep(now=now + timedelta(seconds=91))
    assert Node.objects.get(pk=node_gpu_a.pk).state == "draining"
    assert Allocation.objects.get(pk=job.pk).state == "failed"  # lost as on a node that is down
    assert Allocation.objects.filter(requeued_from=job, state="pending").count() == 1
    assert not Placement.objects.filter(node=node_gpu_a).exists()
    assert node_liveness_sweep(now=now + timedelta(seconds=200)) == {"degraded": 0, "down": 0}

    node = Node.objects.get(pk=node_gpu_a.pk)
    node_heartbeat(node=node, frame=Heartbeat(id="h", seq=1, running=[]), now=now + timedelta(seconds=201))
    assert Node.objects.get(pk=node_gpu_a.pk).state == "draining"
    node_hello(node=node, frame=Hello(id="x", agent_version="1", capacity={}, labels={}, running=[]),
               now=now + timedelta(seconds=202))
    assert Node.objects.get(pk=node_gpu_a.pk).state == "draining"
    assert list(PolicyChange.objects.values_list("action", flat=True)) == ["drain"]


@pytest.mark.parametrize(("heard_s_ago", "health_reason", "expected"), [
    (5, "", "ready"), (31, "", "degraded"), (5, "GPU 3: uncorrectable ECC errors", "degraded"), (None, "", "unknown")])
def test_an_undrain_restores_what_the_agent_says_not_ready_regardless(node_gpu_a, operator, heard_s_ago,
                                                                        health_reason, expected):
    """Before, an undrain made any drained node Ready: a node whose agent was gone took new work."""
    from nodes.drain import node_drain, node_undrain

    now = timezone.now()
    heard = None if heard_s_ago is None else now - timedelta(seconds=heard_s_ago)
    Node.objects.filter(pk=node_gpu_a.pk).update(last_heartbeat_at=heard, health_reason=health_reason)
    node_drain(node=node_gpu_a, actor=operator, reason="firmware")
    Node.objects.filter(pk=node_gpu_a.pk).update(state="drained")
    node_drain(node=node_gpu_a, actor=operator, reason="again")
    assert Node.objects.get(pk=node_gpu_a.pk).state == "drained"  # stays drained
    assert node_undrain(node=node_gpu_a, actor=operator, reason="done", now=now).state == expected
    assert PolicyChange.objects.filter(action="undrain").get().after == {"state": expected}


def test_an_undrain_of_a_node_not_drained_changes_nothing_and_audits_nothing(node_gpu_a, operator):
    from nodes.drain import node_undrain

    assert node_undrain(node=node_gpu_a, actor=operator, reason="by mistake").state == "ready"
    assert Node.objects.get(pk=node_gpu_a.pk).state == "ready"
    assert not PolicyChange.objects.filter(action="undrain").exists()


def test_an_undrain_is_judged_and_audited_by_the_node_s_state_now_not_as_the_caller_read_it(node_gpu_a, operator):
    """The caller's copy of the node may predate a drain (two operators at once): the undrain of
    the node drained since changes it, and must say so in the audit, from the state it had."""
    from nodes.drain import node_undrain

    node_gpu_a.last_heartbeat_at = timezone.now()
    node_gpu_a.save(update_fields=["last_heartbeat_at"])
    Node.objects.filter(pk=node_gpu_a.pk).update(state="drained")  # node_gpu_a still says ready
    assert node_undrain(node=node_gpu_a, actor=operator, reason="done").state == "ready"
    change = PolicyChange.objects.filter(action="undrain").get()
    assert (change.before, change.after) == ({"state": "drained"}, {"state": "ready"})
