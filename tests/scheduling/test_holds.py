"""Nodes being freed for a preemptor stay its own until it starts: no later request in the same
pass, or in any pass, takes them or claims them again."""

from __future__ import annotations

import pytest

from scheduling.actions.lifecycle import allocation_exited
from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import Allocation, Placement
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


def _job(make_allocation, vcluster, klass, nodes=1, **kw):
    return make_allocation(state="pending", node_count=nodes, per_node_gpu=8, preemption_class=klass,
                           checkpoint="auto", vcluster=vcluster, **kw)


def _state(alloc):
    alloc.refresh_from_db()
    return alloc.state


def _claims(node_name):
    """Who holds or runs on a node: (allocation id, kind), sorted."""
    return sorted(Placement.objects.filter(node__name=node_name).values_list("allocation_id", "kind"))


def test_a_waiting_preemptor_keeps_the_nodes_its_victims_freed(resource_group, vcluster_hpc, two_nodes,
                                                               make_allocation):
    first = _job(make_allocation, vcluster_hpc, 1)
    second = _job(make_allocation, vcluster_hpc, 1)
    schedule_pass(resource_group.pk)
    assert _state(first) == _state(second) == "running"
    high = _job(make_allocation, vcluster_hpc, 7, nodes=2)
    schedule_pass(resource_group.pk)
    assert _state(first) == _state(second) == "checkpointing"

    # One victim is gone: its node is free, but it is being freed for the preemptor, which
    # still waits for the other. The requeued victim (it fits there) and a newcomer must wait.
    allocation_checkpoint_done(allocation=first, ok=True, location="/ckpt/1")
    newcomer = _job(make_allocation, vcluster_hpc, 5)
    schedule_pass(resource_group.pk)
    assert _state(high) == "pending" and _state(first) == "pending" and _state(newcomer) == "pending"
    freed = Allocation.objects.get(pk=first.pk).ran_on[0]
    assert _claims(freed) == [(high.pk, "held")]

    schedule_pass(resource_group.pk)  # and again on the next pass
    assert _claims(freed) == [(high.pk, "held")]

    allocation_checkpoint_done(allocation=second, ok=True, location="/ckpt/2")
    schedule_pass(resource_group.pk)
    assert _state(high) == "running"
    assert sorted(high.placements.values_list("kind", flat=True)) == ["assigned", "assigned"]
    assert _state(first) == _state(second) == _state(newcomer) == "pending"

    allocation_exited(allocation=high, exit_code=0, reason="completed")
    schedule_pass(resource_group.pk)
    assert sorted(_state(a) for a in (first, second, newcomer)) == ["pending", "running", "running"]


def test_a_preemptor_decided_in_a_pass_keeps_the_free_node_it_chose(resource_group, vcluster_hpc, two_nodes,
                                                                    make_allocation):
    """The preemptor's nodes are one free node and one it preempts; a request decided after it
    in the same pass must not start on the free one."""
    half = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                           vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _state(half) == "running"
    high = _job(make_allocation, vcluster_hpc, 7, nodes=2)
    small = _job(make_allocation, vcluster_hpc, 0)  # after the preemptor in class order; fits the free node
    schedule_pass(resource_group.pk)
    assert _state(half) == "checkpointing" and _state(high) == "pending"
    assert _state(small) == "pending"
    for node in ("gpu-a", "gpu-b"):
        assert (high.pk, "held") in _claims(node)
        assert not [c for c in _claims(node) if c[0] == small.pk]


def test_a_decision_is_released_when_its_last_victim_leaves_even_if_another_already_runs_again(
        resource_group, vcluster_hpc, two_nodes, make_allocation):
    from nodes.models import Node
    from scheduling.models import PreemptionDecision

    quick = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="none",
                            vcluster=vcluster_hpc)
    slow = _job(make_allocation, vcluster_hpc, 1)
    schedule_pass(resource_group.pk)
    high = _job(make_allocation, vcluster_hpc, 7, nodes=2, constraints={"same": "switch"})
    schedule_pass(resource_group.pk)
    decision = PreemptionDecision.objects.get(preemptor=high, code="PREEMPT")
    allocation_exited(allocation=quick, exit_code=143, reason="terminated")  # requeued
    # A node on another switch: no use to the preemptor, room for the requeued victim.
    Node.objects.create(name="gpu-c", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8, cpu=64,
                        memory=512, labels={"switch": "s2"}, state="ready")
    schedule_pass(resource_group.pk)
    assert _state(high) == "pending" and _state(slow) == "checkpointing"
    assert _state(quick) == "running" and quick.ran_on == ["gpu-c"]  # its second run, elsewhere
    decision.refresh_from_db()
    assert decision.released_at is None  # one victim still leaving
    allocation_checkpoint_done(allocation=slow, ok=True, location="/ckpt/slow")
    decision.refresh_from_db()
    assert decision.released_at is not None
    schedule_pass(resource_group.pk)
    assert _state(high) == "running"
