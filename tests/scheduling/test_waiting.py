"""Why a request waits: each reason code built as its own situation and read through the explain
API as the tenant reads it (code, facts and words)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from nodes.models import Node
from scheduling.models import Allocation, Placement, VCluster
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


def _node(group, name, vcluster, state="ready", **labels):
    return Node.objects.create(name=name, resource_group=group, vcluster=vcluster, gpu=8, cpu=64, memory=512,
                               labels=labels or {"switch": "s1"}, state=state)


def _running(make_allocation, node, klass=1, **fields):
    """Work holding all 8 GPUs of ``node``."""
    fields.setdefault("vcluster", node.vcluster)
    alloc = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=klass,
                            started_at=timezone.now(), **fields)
    Placement.objects.create(allocation=alloc, node=node, gpu=8)
    if node.vcluster is not None and alloc.vcluster_id != node.vcluster_id:
        Node.objects.filter(pk=node.pk).update(borrowed_by=alloc.vcluster)
    return alloc


def _pending(make_allocation, vcluster, klass=3, **fields):
    fields.setdefault("per_node_gpu", 8)
    fields.setdefault("node_count", 1)
    return make_allocation(state="pending", preemption_class=klass, vcluster=vcluster,
                           checkpoint="auto", **fields)


def _reason(api_for, alloc, user="alice"):
    body = api_for(user).get(f"/api/v1/allocations/{alloc.pk}/explain/").json()
    return body["reason"]


@pytest.fixture
def ml(resource_group):
    return VCluster.objects.create(resource_group=resource_group, name="ml", type="ml_training",
                                   max_borrow_pct=0.25)


def test_nothing_binds_it_fits_now(api_for, make_allocation, vcluster_hpc, node_gpu_a):
    job = _pending(make_allocation, vcluster_hpc)
    reason = _reason(api_for, job)
    assert reason["code"] == "FITS_NOW" and "the next scheduler pass starts it" in reason["explanation"]


def test_held(api_for, make_allocation, vcluster_hpc, node_gpu_a):
    """A held job: nothing else counts."""
    job = _pending(make_allocation, vcluster_hpc)
    Allocation.objects.filter(pk=job.pk).update(held=True, held_by="user")
    reason = _reason(api_for, job)
    assert reason["code"] == "HELD" and "on hold" in reason["explanation"] and reason["facts"]["by"] == "user"


def test_dependency(api_for, make_allocation, vcluster_hpc, node_gpu_a):
    first = _pending(make_allocation, vcluster_hpc)
    job = _pending(make_allocation, vcluster_hpc)
    Allocation.objects.filter(pk=job.pk).update(depends_on=[{"type": "afterok", "job": first.pk}],
                                               dependency="waiting")
    reason = _reason(api_for, job)
    assert reason["code"] == "DEPENDENCY" and reason["facts"] == {"unmet": 1, "never": False}
    assert reason["explanation"] == "It waits for 1 job it depends on to complete."
    Allocation.objects.filter(pk=first.pk).update(state="completed")
    Allocation.objects.filter(pk=job.pk).update(dependency="")  # what the next pass settles
    assert _reason(api_for, job)["code"] == "FITS_NOW"


def test_quota(api_for, make_allocation, tenant_physics, vcluster_hpc, two_nodes):
    quota = tenant_physics.quota
    quota.max_gpus = 16
    quota.save()
    _running(make_allocation, two_nodes[0])
    job = _pending(make_allocation, vcluster_hpc, node_count=2)  # 16 GPUs: over 16 with the 8 held
    reason = _reason(api_for, job)
    assert reason["code"] == "QUOTA_MAX_GPUS"
    assert reason["facts"] == {"quota": "max_gpus", "current": 8, "requested": 16, "limit": 16}
    assert reason["explanation"] == ("Your tenant's hard quota on GPUs binds: its running work holds 8, this "
                                     "job needs 16 more, and the limit is 16.")


def test_lending_cap(api_for, make_allocation, resource_group, vcluster_hpc, ml, node_gpu_a):
    """The demo's case: hpc is full, ml has idle nodes, and ml already lends all it may
    (floor(4 x 25%) = 1)."""
    ml_nodes = [_node(resource_group, f"ml-{i}", ml) for i in range(4)]
    _running(make_allocation, node_gpu_a)
    _running(make_allocation, ml_nodes[0], vcluster=vcluster_hpc)  # hpc borrows ml-0
    job = _pending(make_allocation, vcluster_hpc)
    reason = _reason(api_for, job)
    assert reason["code"] == "LENDING_CAP"
    assert reason["facts"]["lenders"] == [{"vcluster": "ml", "idle_nodes": 3, "lent": 1, "cap": 1, "home_nodes": 4,
                                           "max_borrow_pct": 0.25, "allow_lending": True}]
    assert reason["explanation"].startswith(
        "Its vCluster hpc has no free room for it. 3 idle nodes of vCluster ml would hold it, but ml lends at "
        "most 1 of its 4 nodes (25%) and already lends 1")


def test_a_lender_that_does_not_lend(api_for, make_allocation, resource_group, vcluster_hpc, ml, node_gpu_a):
    ml.allow_lending = False
    ml.save()
    _node(resource_group, "ml-0", ml)
    _running(make_allocation, node_gpu_a)
    reason = _reason(api_for, _pending(make_allocation, vcluster_hpc))
    assert reason["code"] == "LENDING_CAP" and "ml does not lend its nodes" in reason["explanation"]


def test_borrow_limit(api_for, make_allocation, resource_group, vcluster_hpc, ml, node_gpu_a):
    vcluster_hpc.allow_borrowing = False
    vcluster_hpc.save()
    _node(resource_group, "ml-0", ml)
    _running(make_allocation, node_gpu_a)
    reason = _reason(api_for, _pending(make_allocation, vcluster_hpc))
    assert reason["code"] == "BORROW_LIMIT" and reason["facts"]["idle_elsewhere"] == 1
    assert "vCluster hpc does not borrow other vClusters' nodes" in reason["explanation"]


def test_non_preemptible_work_may_not_borrow(api_for, make_allocation, resource_group, vcluster_hpc, ml,
                                             node_gpu_a):
    _node(resource_group, "ml-0", ml)
    _running(make_allocation, node_gpu_a)
    job = _pending(make_allocation, vcluster_hpc, preemptible=False)
    reason = _reason(api_for, job)
    assert reason["code"] == "BORROW_LIMIT" and reason["facts"]["why"] == "not_preemptible"


def test_nodes_unavailable(api_for, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    _node(resource_group, "gpu-b", vcluster_hpc, state="draining")
    _node(resource_group, "gpu-c", vcluster_hpc, state="down")
    _running(make_allocation, node_gpu_a)
    reason = _reason(api_for, _pending(make_allocation, vcluster_hpc))
    assert reason["code"] == "NODES_UNAVAILABLE" and reason["facts"] == {"states": {"down": 1, "draining": 1}}
    assert reason["explanation"] == "The nodes that would hold it are out of service (1 down, 1 draining)."


def test_constraints(api_for, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    _node(resource_group, "gpu-b", vcluster_hpc, switch="s2")
    _running(make_allocation, _node(resource_group, "gpu-c", vcluster_hpc, switch="s3"))
    job = _pending(make_allocation, vcluster_hpc, constraints={"labels": {"switch": "s3"}})
    reason = _reason(api_for, job)
    assert reason["code"] == "CONSTRAINTS" and reason["facts"]["free_nodes_without"] == 2
    assert reason["explanation"] == ("Its constraints (label switch=s3) leave out the free nodes: 2 free nodes "
                                     "would hold it without them.")


def test_priority(api_for, make_allocation, resource_group, vcluster_hpc, node_gpu_a, tenant_chemistry):
    """What is being freed goes to the preemptor ahead: the waiting job is told so, without it."""
    _running(make_allocation, node_gpu_a, klass=1)
    bob = tenant_chemistry.memberships.first().user
    ahead = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=6,
                            vcluster=vcluster_hpc, checkpoint="auto", tenant=tenant_chemistry, user=bob)
    schedule_pass(resource_group.pk)
    assert Placement.objects.filter(allocation=ahead, kind="held").exists()
    job = _pending(make_allocation, vcluster_hpc)
    reason = _reason(api_for, job)
    assert reason["code"] == "PRIORITY" and reason["facts"] == {"nodes_being_freed": 1}
    assert "being freed on 1 node, but for work ahead of it in the queue" in reason["explanation"]
    assert str(ahead.pk) not in str(reason)
    # The preemptor itself waits for its victim to leave.
    assert _reason(api_for, ahead, "bob")["code"] == "AWAITING_VICTIMS"


def test_resources_with_the_engines_code(api_for, make_allocation, resource_group, vcluster_hpc, two_nodes):
    for node in two_nodes:
        _running(make_allocation, node, klass=5)
    job = _pending(make_allocation, vcluster_hpc, klass=3)
    schedule_pass(resource_group.pk)  # decided: nothing of a lower class to preempt
    reason = _reason(api_for, job)
    assert reason["code"] == "RESOURCES"
    assert reason["facts"] == {"nodes": 1, "per_node": {"gpu": 8.0}, "usable_nodes": 2, "with_room": 0}
    assert reason["preemption"]["code"] == "NO_FEASIBLE_SET"
    assert reason["explanation"] == (
        "Not enough free capacity where it may run: it needs 1 node with gpu=8, and of the 2 nodes it may use 0 "
        "have room now. Preemption cannot start it sooner: even preempting every eligible allocation would not "
        "free enough room.")


@pytest.mark.postgres
def test_end_to_end_hpc_waits_on_mls_lending_cap_while_ml_nodes_idle(api_for, tenant_physics, resource_group,
                                                                     vcluster_hpc, ml, two_nodes):
    """Submitted over the API, placed by the pass: hpc fills its 2 nodes, borrows the 2 of ml's 8
    that ml may lend (25%), and the fifth job waits with 6 ml nodes idle: the reason says so."""
    for i in range(8):
        _node(resource_group, f"ml-{i}", ml)
    client = api_for("alice")
    ids = [client.post("/api/v1/allocations/", {
        "resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8}, "preemption_class": 3,
        "checkpoint": "auto", "command": ["train"]}, content_type="application/json").json()["id"]
        for _ in range(5)]
    schedule_pass(resource_group.pk)
    states = dict(Allocation.objects.filter(pk__in=ids).values_list("id", "state"))
    assert sorted(states.values()) == ["pending"] + ["running"] * 4
    waiting = next(pk for pk, state in states.items() if state == "pending")
    body = client.get(f"/api/v1/allocations/{waiting}/explain/").json()
    assert body["reason"]["code"] == "LENDING_CAP"
    assert body["reason"]["facts"]["lenders"][0] == {
        "vcluster": "ml", "idle_nodes": 6, "lent": 2, "cap": 2, "home_nodes": 8, "max_borrow_pct": 0.25,
        "allow_lending": True}
    assert "6 idle nodes of vCluster ml would hold it, but ml lends at most 2 of its 8 nodes (25%) and " \
           "already lends 2" in body["reason"]["explanation"]
    assert body["reason"]["preemption"]["code"] == body["waiting"]["code"]  # the engine's, as recorded
    assert body["queue"] == body["queue"] | {"position": 1, "ahead": 0, "queued": 1}
