"""Concurrency on a real PostgreSQL: hard quotas under racing submissions, one pass per group."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.utils import timezone

from scheduling.actions.admission import allocation_submit
from scheduling.errors import QuotaExceeded
from scheduling.models import Allocation, Placement, PreemptionDecision
from scheduling.passes.run import schedule_pass

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _in_threads(n: int, work) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # collected and asserted by the caller
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_twenty_racing_submissions_never_exceed_a_quota_of_ten(resource_group, tenant_physics):
    assert connection.vendor == "postgresql"
    quota = tenant_physics.quota
    quota.max_concurrent_allocations = 10
    quota.max_gpus = 1000
    quota.max_nodes = 1000
    quota.save()
    user = tenant_physics.memberships.first().user

    def submit(i: int):
        return allocation_submit(user=user, tenant=tenant_physics, group=resource_group,
                                 fields={"name": f"r{i}", "node_count": 1, "per_node_gpu": 1})

    results = _in_threads(20, submit)
    kinds = Counter(type(r).__name__ for r in results)
    assert kinds == {"Allocation": 10, "QuotaExceeded": 10}, results
    assert Allocation.objects.filter(tenant=tenant_physics).count() == 10
    refused = next(r for r in results if isinstance(r, QuotaExceeded))
    assert (refused.detail["current"], refused.detail["requested"], refused.detail["limit"]) == (10, 1, 10)


def test_two_passes_at_once_never_share_capacity_or_preempt_twice(resource_group, vcluster_hpc, two_nodes,
                                                                  make_allocation):
    now = timezone.now()
    for node in two_nodes:
        low = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=1,
                              checkpoint="auto", vcluster=vcluster_hpc, started_at=now)
        Placement.objects.create(allocation=low, node=node, gpu=8)
    for i in range(6):
        make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=5 + i % 3,
                        checkpoint="auto", vcluster=vcluster_hpc, name=f"p{i}")

    results = _in_threads(2, lambda i: schedule_pass(resource_group.pk))
    assert all(not isinstance(r, Exception) for r in results), results
    assert sum(r.busy for r in results) >= 1 or sum(r.preempted for r in results) <= 2

    for node in two_nodes:
        assert Placement.objects.filter(node=node, kind="assigned").count() <= 1
        assert Placement.objects.filter(node=node, kind="held").count() <= 1
    chosen = Counter(v["id"] for d in PreemptionDecision.objects.filter(outcome="executed") for v in d.victims)
    assert chosen and max(chosen.values()) == 1
    # a second round of racing passes changes nothing: victims are already leaving
    before = PreemptionDecision.objects.filter(outcome="executed").count()
    _in_threads(2, lambda i: schedule_pass(resource_group.pk))
    assert PreemptionDecision.objects.filter(outcome="executed").count() == before


def test_two_passes_at_once_never_place_two_requests_on_one_free_node(resource_group, vcluster_hpc,
                                                                       node_gpu_a, make_allocation):
    for i in range(12):
        make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc, name=f"p{i}")
    for _ in range(3):
        results = _in_threads(2, lambda i: schedule_pass(resource_group.pk))
        assert all(not isinstance(r, Exception) for r in results), results
        assert Allocation.objects.filter(state="running").count() == 1
        assert Placement.objects.filter(node=node_gpu_a, kind="assigned").count() == 1


def test_two_victims_leaving_at_once_release_their_decision(resource_group, vcluster_hpc, two_nodes,
                                                            make_allocation, monkeypatch):
    """Each victim's report runs in its own transaction; both reach the release check before either
    commits (a barrier holds them there), as two agents reporting in the same instant would."""
    from scheduling.actions import release
    from scheduling.actions.preemption import allocation_checkpoint_done

    victims = [make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1,
                               checkpoint="auto", vcluster=vcluster_hpc) for _ in range(2)]
    schedule_pass(resource_group.pk)
    high = make_allocation(state="pending", node_count=2, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                           vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    decision = PreemptionDecision.objects.get(preemptor=high, code="PREEMPT")
    assert sorted(decision.victim_allocations.values_list("state", flat=True)) == ["checkpointing"] * 2

    both_leaving = threading.Barrier(2, timeout=10)
    check = release._maybe_released

    def after_both(decision_id: int) -> None:
        both_leaving.wait()
        check(decision_id)

    monkeypatch.setattr(release, "_maybe_released", after_both)
    results = _in_threads(2, lambda i: allocation_checkpoint_done(
        allocation=Allocation.objects.get(pk=victims[i].pk), ok=True, location=f"/ckpt/{i}"))
    assert not [r for r in results if isinstance(r, Exception)], results
    decision.refresh_from_db()
    assert decision.released_at is not None


def test_two_borrowers_leaving_at_once_give_the_node_back(resource_group, vcluster_hpc, make_allocation,
                                                          monkeypatch):
    """Two allocations of the borrower share a borrowed node and end in the same instant, each in
    its own transaction, both past deleting their placement before either checks (a barrier)."""
    from nodes.models import Node
    from scheduling.actions import release
    from scheduling.actions.lifecycle import allocation_exited
    from scheduling.models import VCluster

    ml = VCluster.objects.create(resource_group=resource_group, name="ml", allow_lending=True, max_borrow_pct=1.0)
    node = Node.objects.create(name="ml-a", resource_group=resource_group, vcluster=ml, gpu=8, cpu=64, memory=512,
                               state="ready", borrowed_by=vcluster_hpc)
    guests = []
    for _ in range(2):
        guest = make_allocation(state="running", node_count=1, per_node_gpu=4, vcluster=vcluster_hpc,
                                started_at=timezone.now())
        Placement.objects.create(allocation=guest, node=node, gpu=4)
        guests.append(guest)

    both_left = threading.Barrier(2, timeout=10)
    give_back = release.give_back_borrowed

    def after_both(node_ids: list[int]) -> None:
        both_left.wait()
        give_back(node_ids)

    monkeypatch.setattr(release, "give_back_borrowed", after_both)
    results = _in_threads(2, lambda i: allocation_exited(allocation=Allocation.objects.get(pk=guests[i].pk),
                                                         exit_code=0, reason="completed"))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert not Placement.objects.filter(node=node).exists()
    assert Node.objects.get(pk=node.pk).borrowed_by_id is None


@pytest.mark.django_db(transaction=True)
def test_a_pass_turned_away_by_the_lock_asks_to_run_again(resource_group, settings, monkeypatch):
    """Another pass of the group holds the lock: this one does nothing but asks for a pass a
    second later, so the change that asked for it is not left to the periodic sweep."""
    from scheduling import dispatch
    from scheduling.passes.locks import group_lock

    settings.CELERY_TASK_ALWAYS_EAGER = False
    sent = []
    task = dispatch._task(dispatch.SCHEDULE_PASS)
    monkeypatch.setattr(task, "apply_async", lambda args, countdown: sent.append((list(args), countdown)))
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with group_lock(resource_group):
                holding.set()
                done.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        result = schedule_pass(resource_group.pk)
    finally:
        done.set()
        holder.join()
    assert result.busy
    assert sent == [([resource_group.pk], 1)]
