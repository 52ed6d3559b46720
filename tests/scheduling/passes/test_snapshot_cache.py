"""The snapshot kept between passes (PostgreSQL): reused after the pass's own writes, patched with
the allocations anyone else changed, reloaded after any other change (nodes...), including a change
that was still in flight while the snapshot was loaded."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from django.utils import timezone

from nodes.models import Node
from scheduling.models import Allocation, Placement
from scheduling.passes import snapshot_cache
from scheduling.passes.run import schedule_pass

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def loads(monkeypatch):
    """How many times a pass loaded the snapshot from the database."""
    count = [0]
    real = snapshot_cache.load_snapshot

    def counting(group):
        count[0] += 1
        return real(group)

    snapshot_cache.forget()
    monkeypatch.setattr(snapshot_cache, "load_snapshot", counting)
    yield count
    snapshot_cache.forget()


def _pending(make_allocation, vcluster):
    return make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, vcluster=vcluster,
                           submitted_at=timezone.now())


def _node_of(alloc):
    return list(alloc.placements.values_list("node__name", flat=True))


def test_own_writes_keep_the_snapshot_and_others_changes_reload_it(resource_group, vcluster_hpc, two_nodes,
                                                                    make_allocation, operator, loads):
    from nodes.drain import node_drain

    schedule_pass(resource_group.pk)
    schedule_pass(resource_group.pk)
    assert loads[0] == 1  # nothing changed

    first = _pending(make_allocation, vcluster_hpc)  # a submission is not in the snapshot
    schedule_pass(resource_group.pk)
    assert _node_of(first) == ["gpu-a"]
    schedule_pass(resource_group.pk)
    assert loads[0] == 1  # the placement was this pass's own write

    node_drain(node=Node.objects.get(name="gpu-b"), actor=operator, reason="maintenance")
    second = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert loads[0] == 2
    assert _node_of(second) == []  # gpu-a is taken and gpu-b drains: it waits
    assert Allocation.objects.get(pk=second.pk).state == "pending"


def test_a_change_in_flight_during_the_load_is_seen_by_the_next_pass(resource_group, vcluster_hpc, two_nodes,
                                                                     make_allocation, loads):
    in_flight, commit = threading.Event(), threading.Event()

    def drain_gpu_a_slowly():
        try:
            with transaction.atomic():
                Node.objects.filter(name="gpu-a").update(state="draining")
                in_flight.set()
                commit.wait(10)
        finally:
            connections.close_all()

    writer = threading.Thread(target=drain_gpu_a_slowly)
    writer.start()
    assert in_flight.wait(10)
    schedule_pass(resource_group.pk)  # loads while the drain is not committed: gpu-a looks ready
    commit.set()
    writer.join()

    job = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert loads[0] == 2  # the late commit made the kept snapshot stale
    assert _node_of(job) == ["gpu-b"]  # a stale snapshot would have put it on the draining gpu-a


def test_quota_use_in_another_group_reloads_the_quota_book_alone(resource_group, vcluster_hpc, two_nodes,
                                                                  make_allocation, tenant_physics, loads,
                                                                  monkeypatch):
    from scheduling.models import ResourceGroup
    from scheduling.passes.quota_book import QuotaBook

    books = [0]
    real = QuotaBook.load.__func__

    def counting(cls):
        books[0] += 1
        return real(cls)

    monkeypatch.setattr(QuotaBook, "load", classmethod(counting))
    tenant_physics.quota.max_concurrent_allocations = 2
    tenant_physics.quota.save()
    first = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _node_of(first) == ["gpu-a"]
    assert (loads[0], books[0]) == (1, 1)

    # The tenant's second allocation starts in another group: the quota is now used up.
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    elsewhere = make_allocation(state="pending", resource_group=other, node_count=1, per_node_gpu=1)
    Allocation.objects.filter(pk=elsewhere.pk).update(state="running", started_at=timezone.now())

    second = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert (loads[0], books[0]) == (1, 2)  # this group's snapshot is kept, the book is not
    assert _node_of(second) == []  # gpu-b is free, but a third allocation would exceed the quota
    assert Allocation.objects.get(pk=second.pk).state == "pending"

    Allocation.objects.filter(pk=elsewhere.pk).update(state="completed")
    schedule_pass(resource_group.pk)
    assert (loads[0], books[0]) == (1, 3)
    assert _node_of(second) == ["gpu-b"]


def test_a_pass_counts_its_own_placements_in_the_kept_book(resource_group, vcluster_hpc, two_nodes,
                                                         make_allocation, tenant_physics, loads):
    tenant_physics.quota.max_concurrent_allocations = 1
    tenant_physics.quota.save()
    first = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    second = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert loads[0] == 1  # kept: nothing but the pass's own writes happened
    assert _node_of(first) == ["gpu-a"]
    assert _node_of(second) == []  # the kept book counted the first placement


def test_others_changes_to_allocations_patch_the_kept_snapshot(resource_group, vcluster_hpc, two_nodes,
                                                               make_allocation, loads):
    first = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _node_of(first) == ["gpu-a"]

    # Someone else ends it (as an agent's report does): gpu-a is free again.
    with transaction.atomic():
        Allocation.objects.filter(pk=first.pk).update(state="completed")
        Placement.objects.filter(allocation_id=first.pk).delete()
    second = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _node_of(second) == ["gpu-a"]  # a stale snapshot would have seen gpu-a taken: gpu-b

    # Someone else starts one on gpu-b: the next request has nowhere to go.
    with transaction.atomic():
        foreign = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                                  preemption_class=5, started_at=timezone.now())  # not preemptible by class 1
        Placement.objects.create(allocation=foreign, node=two_nodes[1], gpu=8)
    third = _pending(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _node_of(third) == []
    assert Allocation.objects.get(pk=third.pk).state == "pending"
    assert loads[0] == 1  # patched each time, never reloaded

    # A change that is not about allocations (a node) still reloads the whole snapshot.
    Node.objects.filter(name="gpu-a").update(state="draining")
    schedule_pass(resource_group.pk)
    assert loads[0] == 2
