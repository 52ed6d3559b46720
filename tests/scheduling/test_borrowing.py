"""Borrowing idle nodes of another vCluster, and the home vCluster reclaiming them, through the
scheduler and the actions (the engine's own rules are tested in tests/scheduling/engine)."""

from __future__ import annotations

import pytest

from nodes.models import Node
from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import Allocation, Placement, PreemptionDecision, VCluster
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


@pytest.fixture
def lender(resource_group):
    """A vCluster lending its one idle node (at most floor(1 x 1.0) = 1 node)."""
    ml = VCluster.objects.create(resource_group=resource_group, name="ml", type="ml_training",
                                 allow_lending=True, max_borrow_pct=1.0)
    Node.objects.create(name="ml-a", resource_group=resource_group, vcluster=ml, gpu=8, cpu=64, memory=512,
                        labels={"switch": "s1"}, state="ready")
    return ml


def _job(make_allocation, vcluster, klass, nodes=1, checkpoint="auto"):
    return make_allocation(state="pending", node_count=nodes, per_node_gpu=8, preemption_class=klass,
                           checkpoint=checkpoint, vcluster=vcluster)


def _fresh(alloc):
    return Allocation.objects.get(pk=alloc.pk)


def _claims(node_name):
    return sorted(Placement.objects.filter(node__name=node_name).values_list("allocation_id", "kind"))


def test_work_borrows_an_idle_node_and_its_home_reclaims_it(resource_group, vcluster_hpc, node_gpu_a, lender,
                                                            make_allocation):
    home = _job(make_allocation, vcluster_hpc, 1)
    schedule_pass(resource_group.pk)
    assert _fresh(home).ran_on == ["gpu-a"]

    guest = _job(make_allocation, vcluster_hpc, 1)
    schedule_pass(resource_group.pk)  # hpc is full: the idle ml node is borrowed
    guest = _fresh(guest)
    assert guest.state == "running" and guest.ran_on == ["ml-a"]
    assert Node.objects.get(name="ml-a").borrowed_by_id == vcluster_hpc.pk
    # Its history names the node, as every start's does.
    assert [e.reason for e in guest.events.filter(to_state="running")] == ["placed on ml-a"]
    placed = PreemptionDecision.objects.filter(preemptor=guest).order_by("id")
    assert [(d.code, d.borrowed) for d in placed] in ([], [("FITS", ["ml-a"])])

    # The home vCluster wants its node back: the guest is a reclaim victim whatever its class.
    owner = _job(make_allocation, lender, 0)
    schedule_pass(resource_group.pk)
    decision = PreemptionDecision.objects.get(preemptor=owner, code="PREEMPT")
    assert decision.trigger == "reclaim"
    assert [(v["id"], v["reason"]) for v in decision.victims] == [(str(guest.pk), "reclaim")]
    assert _fresh(guest).state == "checkpointing" and _fresh(home).state == "running"
    assert _claims("ml-a") == sorted([(guest.pk, "assigned"), (owner.pk, "held")])

    allocation_checkpoint_done(allocation=_fresh(guest), ok=True, location="/ckpt/guest")
    assert Node.objects.get(name="ml-a").borrowed_by_id is None  # given back once empty
    schedule_pass(resource_group.pk)
    assert _fresh(owner).state == "running" and _fresh(owner).ran_on == ["ml-a"]
    assert _fresh(guest).state == "pending"  # requeued; nothing to borrow now
    assert _claims("ml-a") == [(owner.pk, "assigned")]


def test_a_borrowing_start_mid_pass_keeps_what_the_pass_reserved(resource_group, vcluster_hpc, two_nodes, lender,
                                                                 make_allocation):
    """In one pass: a preemptor is decided (one victim, one free node), then a request starts on a
    borrowed node, which makes the pass write what it staged and reload its snapshot; a request
    decided after that must still not take the free node kept for the preemptor."""
    victim = _job(make_allocation, vcluster_hpc, 1)
    schedule_pass(resource_group.pk)
    assert _fresh(victim).ran_on == ["gpu-a"]

    # Class 7 with checkpoint none is non-preemptible: never on a borrowed node, so it preempts.
    preemptor = _job(make_allocation, vcluster_hpc, 7, nodes=2, checkpoint="none")
    borrower = _job(make_allocation, vcluster_hpc, 5)  # gpu-b is kept for the preemptor: borrows ml-a
    late = _job(make_allocation, vcluster_hpc, 3)  # fits gpu-b alone, were it not kept
    result = schedule_pass(resource_group.pk)

    assert result.preempted == 1 and result.placed == 1
    assert _fresh(victim).state == "checkpointing"
    assert _fresh(borrower).state == "running" and _fresh(borrower).ran_on == ["ml-a"]
    assert _fresh(late).state == "pending" and not Placement.objects.filter(allocation=late).exists()
    assert _claims("gpu-a") == sorted([(victim.pk, "assigned"), (preemptor.pk, "held")])
    assert _claims("gpu-b") == [(preemptor.pk, "held")]
    assert PreemptionDecision.objects.filter(preemptor=preemptor, code="PREEMPT").count() == 1
    assert PreemptionDecision.objects.filter(victim_allocations=victim).count() == 1

    schedule_pass(resource_group.pk)  # and the next pass agrees
    assert _fresh(late).state == "pending"
    assert _claims("gpu-b") == [(preemptor.pk, "held")]


def test_a_borrowed_node_goes_home_when_the_borrower_s_last_hold_there_is_cancelled(
        resource_group, vcluster_hpc, lender, make_allocation, operator):
    from scheduling.actions.admission import allocation_cancel

    node = Node.objects.get(name="ml-a")
    Node.objects.filter(pk=node.pk).update(borrowed_by=vcluster_hpc)
    waiting = _job(make_allocation, vcluster_hpc, 7)
    owner_waiting = _job(make_allocation, lender, 7)
    Placement.objects.create(allocation=waiting, node=node, kind="held")
    Placement.objects.create(allocation=owner_waiting, node=node, kind="held")

    allocation_cancel(allocation=owner_waiting, actor=operator)  # the home's hold: still lent
    assert Node.objects.get(pk=node.pk).borrowed_by_id == vcluster_hpc.pk
    allocation_cancel(allocation=waiting, actor=operator)  # the borrower's last claim there
    assert Node.objects.get(pk=node.pk).borrowed_by_id is None
