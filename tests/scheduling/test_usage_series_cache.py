"""A chart's answer is cached, never stale and never another reader's: each write to the stored
series (a new sample, a change, the folding) is in the very next read, and who may read a scope
is checked before the cache is looked at."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from scheduling import usage, usage_fold, usage_series
from scheduling.models import UsageSample

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]  # the generation is kept by a trigger
URL = "/api/v1/usage/series/"


@pytest.fixture
def reads(monkeypatch):
    """How many times the series was read from the rows (not served from the cache)."""
    calls = []
    real = usage_series.series

    def counted(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(usage_series, "series", counted)
    return calls


@pytest.fixture
def read_at(monkeypatch):
    """The moment every read of the test is made at. An answer is served from the cache only
    within the minute it was read in: reads either side of a minute's turn, which a slow run can
    straddle, would each be read afresh, whatever was written between them."""
    moment = timezone.now()
    monkeypatch.setattr(usage_series, "timezone", SimpleNamespace(now=lambda: moment))
    return moment


def _sample(rg: int, start, gpu_used: float, scope: str = "g", scope_id: int | None = None,
            resolution: int = 60) -> UsageSample:
    return UsageSample(resolution=resolution, start=start, scope=scope, scope_id=scope_id or rg,
                       resource_group_id=rg, gpu_used=gpu_used)


def test_a_sample_written_after_a_read_is_in_the_next_read(resource_group, operator, api_for, reads, read_at):
    now = usage.floor_to(read_at, 60)
    rg = resource_group.pk
    UsageSample.objects.bulk_create([_sample(rg, now - timedelta(minutes=5), 6)])
    op = api_for("op")
    query = {"scope": "group", "name": "rg-main", "range": "1h"}

    first = op.get(URL, query).json()
    assert sum(first["gpu_used"]) == 6
    again = op.get(URL, query).json()
    assert again == first and len(reads) == 1  # nothing written: served from the cache

    # Older than the newest stored minute: a cache keyed by the newest sample alone would miss it.
    UsageSample.objects.bulk_create([_sample(rg, now - timedelta(minutes=20), 3)])
    body = op.get(URL, query).json()
    assert sum(body["gpu_used"]) == 9 and len(reads) == 2
    assert body["gpu_used"][body["t"].index(int((now - timedelta(minutes=20)).timestamp()))] == 3

    UsageSample.objects.filter(scope="g", scope_id=rg, start=now - timedelta(minutes=5)).update(gpu_used=1)
    assert sum(op.get(URL, query).json()["gpu_used"]) == 4  # a change in place

    UsageSample.objects.filter(scope="g", scope_id=rg, start=now - timedelta(minutes=20)).delete()
    assert sum(op.get(URL, query).json()["gpu_used"]) == 1  # a row gone
    assert len(reads) == 4


def test_the_folding_is_in_the_next_read(resource_group, operator, api_for, reads):
    """Minutes older than 2 days become quarters: the 7-day chart reads the quarters at once."""
    now = timezone.now()
    rg = resource_group.pk
    old = usage.floor_to(now - timedelta(days=3), 900)
    UsageSample.objects.bulk_create([_sample(rg, old + timedelta(minutes=m), 8) for m in range(15)])
    op = api_for("op")
    query = {"scope": "group", "name": "rg-main", "range": "7d"}
    before = op.get(URL, query).json()
    assert sum(before["gpu_used"]) == pytest.approx(8 * 15 / 60)  # 15 minutes of 8 GPUs in an hour's step

    usage_fold.fold(now=now)
    assert not UsageSample.objects.filter(resolution=60).exists()
    after = op.get(URL, query).json()
    assert len(reads) == 2  # read again from the quarter, not served from before the folding
    assert sum(after["gpu_used"]) == pytest.approx(8 * 15 / 60)

def test_the_sampler_s_new_minute_is_in_the_next_read(resource_group, node_gpu_a, operator, api_for, reads,
                                                     read_at):
    """The live 1 h chart: the minute the sampler writes is served at once, not after the cache's time."""
    from scheduling.models import MetricRollup

    end = usage.floor_to(read_at, 60)
    MetricRollup.objects.create(key=usage.MARK, value=(end - timedelta(minutes=2)).timestamp())
    UsageSample.objects.bulk_create([_sample(resource_group.pk, end - timedelta(minutes=30), 1)])
    op = api_for("op")
    query = {"scope": "group", "name": "rg-main", "range": "1h"}
    before = op.get(URL, query).json()
    assert sum(before["gpu_free"]) == 0 and op.get(URL, query).json() == before  # nothing sampled yet
    assert len(reads) == 1  # the second read from the cache

    assert usage.sample(now=end) == 2
    after = op.get(URL, query).json()
    # node_gpu_a's 8 GPUs were free in both minutes the sampler wrote.
    assert sum(after["gpu_free"]) == 16 and len(reads) == 2


def test_who_may_read_is_checked_before_the_cache(resource_group, tenant_physics, tenant_chemistry, operator,
                                                  api_for, monkeypatch):
    now = usage.floor_to(timezone.now(), 60)
    rg = resource_group.pk
    UsageSample.objects.bulk_create([
        _sample(rg, now - timedelta(minutes=3), 7, scope="t", scope_id=tenant_chemistry.pk),
        _sample(rg, now - timedelta(minutes=3), 2, scope="t", scope_id=tenant_physics.pk)])
    other = {"scope": "tenant", "name": "chemistry", "range": "1h"}
    assert sum(api_for("op").get(URL, other).json()["gpu_used"]) == 7  # cached now, for the operator

    looked = []
    real_get = usage_series.cache.get
    monkeypatch.setattr(usage_series.cache, "get", lambda key, *a, **k: looked.append(key) or real_get(key, *a, **k))
    alice = api_for("alice")  # a member of physics only
    refused = alice.get(URL, other)
    assert refused.status_code == 403 and "gpu_used" not in refused.json()
    assert looked == []  # refused before the cache was looked at

    mine = alice.get(URL, {"scope": "tenant", "name": "physics", "range": "1h"}).json()
    assert sum(mine["gpu_used"]) == 2 and len(looked) == 1  # its own series, under its own key
