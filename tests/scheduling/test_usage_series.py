"""The usage series: sampled late from the history, folded with age, served for charts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from scheduling import usage, usage_fold
from scheduling.models import MetricRollup, Placement, PreemptionDecision, UsageSample
from tests.scheduling.test_accounting import history

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)


def t(minutes: float) -> datetime:
    return T0 + timedelta(seconds=minutes * 60)


def test_minutes_missed_are_sampled_later_from_the_transitions(make_allocation, vcluster_hpc, node_gpu_a,
                                                              tenant_physics, resource_group):
    alloc = make_allocation(node_count=1, per_node_gpu=4, vcluster=vcluster_hpc, submitted_at=t(0.5))
    decision = PreemptionDecision.objects.create(
        resource_group=resource_group, decided_for=t(3), result="preempt", code="PREEMPT", explanation="x",
        outcome="executed", victims=[{"id": str(alloc.pk), "reason": "LOWER_CLASS", "action": "checkpoint"}])
    PreemptionDecision.objects.filter(pk=decision.pk).update(created_at=t(3))
    history(alloc, [("pending", t(0.5)), ("running", t(1.5)), ("checkpointing", t(3)),
                    ("suspended", t(3.75)), ("pending", t(3.75))])
    MetricRollup.objects.create(key=usage.MARK, value=T0.timestamp())  # the sampler last ran at 22:00

    assert usage.sample(now=t(5) + timedelta(seconds=10)) == 5   # five minutes, sampled at once
    assert usage.sample(now=t(5) + timedelta(seconds=50)) == 0   # each minute once
    group = {s.start: s for s in UsageSample.objects.filter(scope="g", scope_id=resource_group.pk)}
    # By hand: 4 GPUs held 22:01:30-22:03:45 (running, then checkpointing), pending 22:00:30-22:01:30
    # and again from 22:03:45; the node has 8 GPUs.
    assert [(group[t(m)].gpu_used, group[t(m)].gpu_free) for m in range(5)] == [
        (0, 8), (2, 6), (4, 4), (3, 5), (0, 8)]
    assert [(group[t(m)].pending, group[t(m)].pending_gpus) for m in range(5)] == [
        (0.5, 2), (0.5, 2), (0, 0), (0.25, 1), (1, 4)]
    assert [group[t(m)].checkpoint_seconds for m in range(5)] == [0, 0, 0, 45, 0]
    assert [group[t(m)].preemptions for m in range(5)] == [{}, {}, {}, {"LOWER_CLASS": 1}, {}]
    tenant = {s.start: s.gpu_used for s in UsageSample.objects.filter(scope="t", scope_id=tenant_physics.pk)}
    vcluster = {s.start: s.gpu_used for s in UsageSample.objects.filter(scope="v", scope_id=vcluster_hpc.pk)}
    assert tenant == vcluster == {t(0): 0, t(1): 2, t(2): 4, t(3): 3, t(4): 0}  # rows only where something moved


def _minute(start, **values):
    return UsageSample(resolution=60, start=start, scope="g", scope_id=1, resource_group_id=1, **values)


def test_folding_averages_gauges_sums_counters_and_drops_after_a_year():
    day = datetime(2026, 1, 10, tzinfo=UTC)
    UsageSample.objects.bulk_create(
        [_minute(day + timedelta(minutes=m), gpu_used=8, checkpoint_seconds=2, preemptions={"A": 1})
         for m in range(10)]  # 10 of the 15 minutes at 8 GPUs, 5 missing (zero)
        + [_minute(day + timedelta(minutes=15), gpu_used=4)])
    usage_fold.fold(now=day + timedelta(days=2, minutes=40))
    rows = list(UsageSample.objects.order_by("start").values_list("resolution", "start", "gpu_used",
                                                                  "checkpoint_seconds", "preemptions"))
    assert rows == [(900, day, 8 * 10 / 15, 20, {"A": 10}), (900, day + timedelta(minutes=15), 4 / 15, 0, {})]
    usage_fold.fold(now=day + timedelta(days=61))
    ((resolution, start, gpu_used, checkpoint, preemptions),) = UsageSample.objects.values_list(
        "resolution", "start", "gpu_used", "checkpoint_seconds", "preemptions")
    # A day's average: 10 minutes at 8 GPUs and one at 4 out of 1,440 minutes.
    assert (resolution, start, checkpoint, preemptions) == (86400, day, 20, {"A": 10})
    assert gpu_used == pytest.approx((10 * 8 + 4) / 1440)
    usage_fold.fold(now=day + timedelta(days=366))
    assert not UsageSample.objects.exists()


def test_series_endpoint_serves_the_stored_values_to_whom_may_read_them(resource_group, tenant_physics,
                                                                       tenant_chemistry, operator, api_for):
    now = usage.floor_to(timezone.now(), 60)
    UsageSample.objects.bulk_create([
        UsageSample(resolution=60, start=now - timedelta(minutes=10), scope="g", scope_id=resource_group.pk,
                    resource_group_id=resource_group.pk, gpu_used=6, gpu_free=2, preemptions={"LOWER_CLASS": 2}),
        UsageSample(resolution=60, start=now - timedelta(minutes=3), scope="t", scope_id=tenant_physics.pk,
                    resource_group_id=resource_group.pk, gpu_used=5, pending=3)])
    body = api_for("op").get("/api/v1/usage/series/", {"scope": "group", "name": "rg-main", "range": "1h"}).json()
    assert body["step"] == 60 and len(body["t"]) == 60
    i = body["t"].index(int((now - timedelta(minutes=10)).timestamp()))
    assert (body["gpu_used"][i], body["gpu_free"][i], body["preemptions"]["LOWER_CLASS"][i]) == (6, 2, 2)
    assert sum(body["gpu_used"]) == 6
    alice = api_for("alice")
    mine = alice.get("/api/v1/usage/series/", {"scope": "tenant", "name": "physics", "range": "24h"}).json()
    # One minute of 5 GPUs (and 3 pending) in a quarter: its mean over the quarter, or, where that
    # quarter is the latest and still filling, over its minutes so far (the request may read the
    # clock a minute after this test did).
    quarter = usage.floor_to(now - timedelta(minutes=3), 900)
    so_far = [min(900.0, (now - quarter).total_seconds() + extra) for extra in (0, 60)]
    assert mine["step"] == 900
    assert any(sum(mine["gpu_used"]) == pytest.approx(5 * 60 / span, abs=1e-4)
               and sum(mine["pending"]) == pytest.approx(3 * 60 / span, abs=1e-4) for span in so_far), mine
    assert alice.get("/api/v1/usage/series/", {"scope": "tenant", "name": "chemistry"}).status_code == 403
    assert alice.get("/api/v1/usage/series/", {"scope": "group", "name": "rg-main"}).status_code == 403
    # Names that exist and names that do not are refused alike: a tenant cannot probe for them.
    for scope, name in (("tenant", "no-such-tenant"), ("group", "no-such-group"), ("vcluster", "nothing")):
        refused = alice.get("/api/v1/usage/series/", {"scope": scope, "name": name, "resource_group": "rg-main"})
        assert refused.status_code == 403, (scope, name)
    bad = api_for("op").get("/api/v1/usage/series/", {"scope": "vcluster", "name": "hpc"})
    assert bad.status_code == 400 and "resource_group" in bad.json()


def test_nodes_held_for_a_preemptor_count_its_gpus_as_held(make_allocation, vcluster_hpc, node_gpu_a,
                                                          tenant_physics, resource_group):
    preemptor = make_allocation(node_count=1, per_node_gpu=6, vcluster=vcluster_hpc, submitted_at=t(0))
    # The pass writes a held placement with no resources of its own while victims leave the node.
    Placement.objects.create(allocation=preemptor, node=node_gpu_a, kind="held")
    MetricRollup.objects.create(key=usage.MARK, value=T0.timestamp())

    assert usage.sample(now=t(1) + timedelta(seconds=5)) == 1
    group = UsageSample.objects.get(scope="g", scope_id=resource_group.pk, start=t(0))
    tenant = UsageSample.objects.get(scope="t", scope_id=tenant_physics.pk, start=t(0))
    # By hand: 6 of the node's 8 GPUs are held back for the preemptor, none in use.
    assert (group.gpu_held, group.gpu_used, group.gpu_free) == (6, 0, 2)
    assert tenant.gpu_held == 6


@pytest.mark.postgres
def test_a_range_over_minutes_and_quarters_reads_the_same_grouped_in_sql_or_merged(resource_group):
    """A 30-day read spans minute rows (the last 2 days) and 15-minute rows (before): PostgreSQL's
    grouped query and the row-by-row merge give the same buckets, each checked by hand below."""
    from scheduling import usage_series

    now = usage.floor_to(timezone.now(), 4 * 3600) + timedelta(minutes=30)
    bucket = usage.floor_to(now - timedelta(hours=3), 4 * 3600)  # the latest complete 4-hour bucket
    old = now - timedelta(days=10)
    old_bucket = usage.floor_to(old, 4 * 3600)
    rg = resource_group.pk
    UsageSample.objects.bulk_create(
        [UsageSample(resolution=60, start=bucket + timedelta(minutes=m), scope="g", scope_id=rg,
                     resource_group_id=rg, gpu_used=6, checkpoint_seconds=1, preemptions={"A": 1} if m < 2 else {})
         for m in range(30)]
        + [UsageSample(resolution=900, start=old_bucket + timedelta(minutes=15 * q), scope="g", scope_id=rg,
                       resource_group_id=rg, gpu_used=4, pending=2, preemptions={"B": 3}) for q in range(4)])
    args = ("g", rg, usage.floor_to(now - timedelta(days=30), 14400), usage.floor_to(now, 60), 14400, None)
    grouped, merged = usage_series._built_sql(*args), usage_series._built_orm(*args)
    assert set(grouped) == set(merged) == {int(bucket.timestamp()), int(old_bucket.timestamp())}
    for b in grouped:
        for field in (*usage.GAUGES, *usage.COUNTERS):
            assert grouped[b].get(field, 0) == pytest.approx(merged[b].get(field, 0))
        assert grouped[b].get("preemptions", {}) == merged[b].get("preemptions", {})
    recent, older = grouped[int(bucket.timestamp())], grouped[int(old_bucket.timestamp())]
    assert recent["gpu_used"] == pytest.approx(6 * 30 / 240) and recent["checkpoint_seconds"] == 30
    assert recent["preemptions"] == {"A": 2}
    assert older["gpu_used"] == pytest.approx(4 * 60 / 240) and older["pending"] == pytest.approx(2 * 60 / 240)
    assert older["preemptions"] == {"B": 12}


def test_the_latest_step_is_a_mean_over_its_part_sampled_so_far(resource_group):
    """A 24 h chart 7 minutes into a quarter, the sampler's mark 6 minutes in: 8 GPUs used in every
    minute sampled reads 8 in that quarter as in the full ones, not 8 x 6/15; counters are sums."""
    from scheduling import usage_series

    now = datetime(2026, 11, 28, 10, 7, 20, tzinfo=UTC)
    quarter = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    rg = resource_group.pk
    minutes = [quarter - timedelta(minutes=m) for m in range(1, 16)] + [quarter + timedelta(minutes=m)
                                                                        for m in range(6)]
    UsageSample.objects.bulk_create([
        UsageSample(resolution=60, start=m, scope="g", scope_id=rg, resource_group_id=rg, gpu_used=8,
                    gpu_hours_lost=0.5) for m in minutes])
    MetricRollup.objects.create(key=usage.MARK, value=(quarter + timedelta(minutes=6)).timestamp())
    body = usage_series.series(scope="g", scope_id=rg, range_name="24h", now=now)
    at = {t: i for i, t in enumerate(body["t"])}
    full, latest = at[int((quarter - timedelta(minutes=15)).timestamp())], at[int(quarter.timestamp())]
    assert latest == len(body["t"]) - 1
    assert body["gpu_used"][full] == body["gpu_used"][latest] == 8
    assert (body["gpu_hours_lost"][full], body["gpu_hours_lost"][latest]) == (7.5, 3.0)
    MetricRollup.objects.filter(key=usage.MARK).delete()  # nothing sampled by the sampler: up to now
    again = usage_series.series(scope="g", scope_id=rg, range_name="24h", now=now)
    assert again["gpu_used"][latest] == pytest.approx(8 * 6 / 7, abs=1e-4)  # 6 of the 7 minutes so far
