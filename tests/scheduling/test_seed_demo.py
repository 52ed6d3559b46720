from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.utils import timezone

from nodes.models import Node
from scheduling.accounting import gpu_hours
from scheduling.models import (
    Allocation,
    Placement,
    PreemptionDecision,
    ResourceGroup,
    SessionType,
    Tenant,
    TenantShare,
    VCluster,
)
from scheduling.passes.run import schedule_pass
from scheduling.states import State

pytestmark = pytest.mark.django_db


def test_seed_demo_builds_the_demo_cluster_and_is_idempotent():
    call_command("seed_demo")
    counts = (ResourceGroup.objects.count(), Node.objects.count(), Allocation.objects.count())
    call_command("seed_demo")
    assert (ResourceGroup.objects.count(), Node.objects.count(), Allocation.objects.count()) == counts
    assert Node.objects.filter(gpu__gt=0, labels__has_key="switch").count() >= 48
    assert {p["kind"] for p in ResourceGroup.objects.values_list("policy", flat=True)} >= {"class_cost", "rank", "fair_share"}
    assert set(VCluster.objects.values_list("type", flat=True)) == {
        "hpc_batch", "ml_training", "service", "sensitive", "interactive"}
    assert SessionType.objects.values("rank").distinct().count() >= 3
    assert set(Tenant.objects.values_list("name", flat=True)) == {"physics", "chemistry", "biology"}
    assert all(hasattr(t, "quota") for t in Tenant.objects.all())
    op = authenticate(username="operator", password="lattice-operator")
    assert op is not None and op.is_staff
    assert authenticate(username="alice", password="lattice-demo").memberships.get().tenant.name == "physics"
    # Each demo tenant's work goes to gpu-main when it names no group (the CLI without --group).
    assert set(Tenant.objects.values_list("quota__default_resource_group__name", flat=True)) == {"gpu-main"}


def test_the_fair_share_demo_group_starves_biology_until_it_preempts():
    call_command("seed_demo")
    group = ResourceGroup.objects.get(name="fair-west")
    t0 = timezone.now()
    schedule_pass(group.pk, now=t0)
    biology = TenantShare.objects.get(resource_group=group, tenant__name="biology")
    assert (biology.share, biology.below_since) == (0.0, t0)
    schedule_pass(group.pk, now=t0 + timedelta(seconds=31))  # past the demo's 30 s starvation timeout
    decision = PreemptionDecision.objects.get(resource_group=group, result="preempt")
    assert decision.preemptor.tenant.name == "biology"
    # the newest work above its tenant's share: chemistry's 1-node job started half an hour ago
    assert [Allocation.objects.get(pk=v["id"]).ran_on for v in decision.victims] == [["fw-west-08"]]


def test_seed_demo_gives_the_charts_a_week_of_history_and_the_sampler_goes_on_from_it():
    from scheduling import usage
    from scheduling.models import MetricRollup, UsageSample

    before = timezone.now()
    call_command("seed_demo")
    now = timezone.now()
    group = ResourceGroup.objects.get(name="gpu-main")
    rows = UsageSample.objects.filter(scope="g", scope_id=group.pk)
    minutes = rows.filter(resolution=60)
    assert minutes.count() >= 2 * 24 * 60 - 15  # the last 2 days a minute at a time
    assert rows.filter(resolution=900, start__lt=now - timedelta(days=6)).exists()  # quarters before
    assert all(0 <= used <= 256 for used in rows.values_list("gpu_used", flat=True))  # 32 nodes of 8 GPUs
    # the history ends on the minute the command read the clock, which a slow run can cross
    end = datetime.fromtimestamp(MetricRollup.objects.get(key=usage.MARK).value, tz=UTC)
    assert end in {usage.floor_to(before, 60), usage.floor_to(now, 60)}
    latest = minutes.order_by("-start").values_list("start", flat=True).first()
    assert latest == end - timedelta(minutes=1)
    count = UsageSample.objects.count()
    call_command("seed_demo")  # again: nothing more made up
    assert UsageSample.objects.count() == count
    assert usage.sample(now=end + timedelta(minutes=3)) == 3  # the sampler goes on from the mark
    assert minutes.filter(start__gte=end).count() == 3


def test_the_fair_share_demo_group_does_not_take_back_work_just_placed():
    """The demo's thrash: a preemption drops the victim's tenant below its own line; 30 s later it
    starves and takes a node back from work that had only just started, and so on. Here physics'
    3-node job was just placed, biology runs on fw-west-08 and chemistry's 1-node job waits again:
    chemistry starves, and the only work it could preempt is physics' job, a minute old."""
    call_command("seed_demo")
    group = ResourceGroup.objects.get(name="fair-west")
    t0 = timezone.now()
    physics = Allocation.objects.get(resource_group=group, ran_on=["fw-west-03", "fw-west-04", "fw-west-05"])
    Allocation.objects.filter(pk=physics.pk).update(started_at=t0 - timedelta(minutes=1))
    chemistry = Allocation.objects.get(resource_group=group, ran_on=["fw-west-08"])
    node = chemistry.placements.get().node
    chemistry.placements.all().delete()
    Allocation.objects.filter(pk=chemistry.pk).update(state=State.PENDING, started_at=None, state_changed_at=t0)
    biology = Allocation.objects.get(resource_group=group, tenant__name="biology")
    Allocation.objects.filter(pk=biology.pk).update(state=State.RUNNING, started_at=t0 - timedelta(minutes=1),
                                                    ran_on=[node.name])
    Placement.objects.create(allocation=biology, node=node, gpu=8, cpu=64, memory=512)

    schedule_pass(group.pk, now=t0)
    schedule_pass(group.pk, now=t0 + timedelta(seconds=31))  # chemistry starving now
    assert TenantShare.objects.get(resource_group=group, tenant__name="chemistry").below_since == t0
    assert not PreemptionDecision.objects.filter(resource_group=group, result="preempt").exists()
    assert Allocation.objects.get(pk=physics.pk).state == State.RUNNING


def test_the_demo_bills_its_running_work_from_when_it_started():
    """The job page's GPU-hours and its elapsed time tell the same story: the seeded events are
    dated as the work they describe, not as the moment the demo was made."""
    call_command("seed_demo")
    now = timezone.now()
    expected: dict[str, float] = {}
    for alloc in Allocation.objects.filter(state=State.RUNNING).select_related("tenant"):
        gpus = alloc.node_count * alloc.per_node_gpu
        expected[alloc.tenant.name] = expected.get(alloc.tenant.name, 0.0) + \
            gpus * (now - alloc.started_at).total_seconds() / 3600
    billed = {Tenant.objects.get(pk=key[0]).name: hours
              for key, hours in gpu_hours(since=now - timedelta(days=2), until=now).items()}
    assert expected and set(billed) == set(expected)
    for name, hours in expected.items():
        assert billed[name] == pytest.approx(hours, rel=1e-3), name


def test_the_demo_s_work_is_numbered_in_the_order_it_was_submitted():
    """Lists are newest first by id: a later id must not be older work."""
    call_command("seed_demo")
    submitted = list(Allocation.objects.order_by("pk").values_list("submitted_at", flat=True))
    assert len(submitted) >= 10
    assert all(a <= b for a, b in zip(submitted, submitted[1:], strict=False))
