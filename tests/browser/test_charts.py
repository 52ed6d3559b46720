"""The charts draw the stored series: what each chart holds in the page (uPlot's data, read back)
is compared with values this test works out from the samples it stored; the 1 h range takes a
new sample when the live feed moves, without a reload; a tenant gets its own charts only."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect
from websockets.sync.client import connect

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.models import UsageSample

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _store(group, tenant=None, minutes=range(5, 50)) -> dict[int, dict]:
    """Minute samples of the group (and of a tenant in it, its GPUs in use under "tenant") some
    minutes back; by epoch second."""
    now = timezone.now().replace(second=0, microsecond=0)
    stored: dict[int, dict] = {}
    rows = []
    for m in minutes:
        start = now - timedelta(minutes=m)
        values = {"gpu_used": m % 7, "gpu_held": 1.0 if m % 5 == 0 else 0.0, "gpu_free": 8 - m % 7,
                  "pending": m % 3, "pending_gpus": 8 * (m % 3),
                  "preemptions": {"priority": 1} if m % 10 == 0 else {}}
        stored[int(start.timestamp())] = {**values, "tenant": m % 4}
        rows.append(UsageSample(resolution=60, start=start, scope="g", scope_id=group.pk,
                                resource_group_id=group.pk, **values))
        if tenant is not None:
            rows.append(UsageSample(resolution=60, start=start, scope="t", scope_id=tenant.pk,
                                    resource_group_id=group.pk, gpu_used=m % 4))
    UsageSample.objects.bulk_create(rows)
    return stored


def _data(page, chart_id: str, step: int) -> list[list[float]]:
    """The chart's data in the page once it shows buckets of ``step`` seconds."""
    page.wait_for_function(
        "([id, step]) => { const c = (window.latticeCharts || {})[id];"
        " return c && c.data[0].length > 1 && c.data[0][1] - c.data[0][0] === step; }",
        arg=[chart_id, step], timeout=15_000)
    return page.evaluate("id => window.latticeCharts[id].data", chart_id)


def test_ops_charts_hold_the_stored_minutes_and_their_quarter_hour_averages(login, live_server_url, operator,
                                                                          resource_group, node_gpu_a):
    stored = _store(resource_group)
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.click("#charts button[data-range='1h']")
    util = _data(page, "chart-utilisation-rg-main", 60)
    t = util[0]
    assert len(t) == 60 and all(b - a == 60 for a, b in zip(t, t[1:], strict=False))
    assert set(stored) <= set(t)
    # GPUs in use, held, borrowed, free: the stored values at their minutes, zero elsewhere.
    for line, field in ((1, "gpu_used"), (2, "gpu_held"), (4, "gpu_free")):
        assert util[line] == [stored.get(x, {}).get(field, 0) for x in t]
    assert util[3] == [0] * 60
    queue = _data(page, "chart-queue-rg-main", 60)
    assert queue[1] == [stored.get(x, {}).get("pending", 0) for x in queue[0]]
    assert queue[2] == [stored.get(x, {}).get("pending_gpus", 0) for x in queue[0]]
    pre = _data(page, "chart-preemptions-rg-main", 60)
    # One preemption in a minute is 60 an hour.
    assert pre[1] == [60 if stored.get(x, {}).get("preemptions") else 0 for x in pre[0]]
    assert page.locator("#chart-preemptions-rg-main .u-legend").inner_text().count("priority per hour") == 1

    before = timezone.now()
    page.click("#charts button[data-range='24h']")
    util = _data(page, "chart-utilisation-rg-main", 900)
    after = timezone.now()
    assert len(util[0]) >= 96
    for x, used in zip(util[0], util[1], strict=True):
        minutes = [v["gpu_used"] for s, v in stored.items() if x <= s < x + 900]
        if x + 900 <= int(before.timestamp()) // 60 * 60:  # a full quarter: a missing minute counts as zero
            assert used == pytest.approx(sum(minutes) / 15, abs=1e-4)
        else:  # the latest, still filling: a mean over its minutes so far (the server read the clock
            # between before and after; a sampler's mark may stand a minute behind it)
            so_far = {(int(t.timestamp()) // 60 * 60 - x) // 60 - lag for t in (before, after) for lag in (0, 1)}
            assert any(used == pytest.approx(sum(minutes) / k, abs=1e-4) for k in so_far if 0 < k <= 15), \
                (used, minutes, so_far)


def test_a_range_without_preemptions_says_so_in_the_legend(login, live_server_url, operator, resource_group):
    _store(resource_group, minutes=[m for m in range(5, 50) if m % 10])  # none of the preempting minutes
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.click("#charts button[data-range='1h']")
    pre = _data(page, "chart-preemptions-rg-main", 60)
    assert set(pre[1]) == {0}
    expect(page.locator("#chart-preemptions-rg-main .u-legend")).to_contain_text(
        "preemptions per hour: none in this range")


def test_the_one_hour_range_takes_a_new_sample_when_the_feed_moves(login, live_server_url, operator,
                                                                  resource_group, node_gpu_a):
    stored = _store(resource_group, minutes=range(10, 20))
    Node.objects.filter(pk=node_gpu_a.pk).update(state="degraded")  # heard from again below: an event
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.wait_for_function("document.body.dataset.live === 'on'", timeout=10_000)
    page.click("#charts button[data-range='1h']")
    before = _data(page, "chart-utilisation-rg-main", 60)
    assert sum(before[1]) == sum(v["gpu_used"] for v in stored.values())
    page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded
    late = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    UsageSample.objects.create(resolution=60, start=late, scope="g", scope_id=resource_group.pk,
                               resource_group_id=resource_group.pk, gpu_used=7.5)
    token = agent_token_issue(node=node_gpu_a)  # the node is ready again: an event on the feed
    with connect(live_server_url.replace("http://", "ws://") + "/ws/agent/",
                 additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(json.dumps({"type": "heartbeat", "id": "hb-1", "seq": 1, "running": []}))
        assert json.loads(ws.recv(timeout=10)) == {"type": "ack", "id": "hb-1"}
    page.wait_for_function(
        "x => { const d = window.latticeCharts['chart-utilisation-rg-main'].data;"
        " return d[1][d[0].indexOf(x)] === 7.5; }", arg=int(late.timestamp()), timeout=15_000)
    assert page.evaluate("window.loadedOnce") is True


def test_group_page_charts_a_tenant_against_its_fair_share(login, live_server_url, operator, resource_group,
                                                           vcluster_hpc, node_gpu_a, tenant_physics):
    stored = _store(resource_group, tenant=tenant_physics, minutes=range(5, 15))
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/groups/rg-main/")
    page.click("#charts button[data-range='1h']")
    share = _data(page, "chart-share-rg-main-physics", 60)
    assert share[1] == [stored.get(x, {}).get("tenant", 0) for x in share[0]]
    assert set(share[2]) == {0.5 * 8}  # the quota's fair share of the group's one 8-GPU node
    expect(page.locator("#chart-vcluster-rg-main-hpc")).to_be_visible()


def test_a_tenant_charts_its_own_usage_against_quota_and_budget_only(login, live_server_url, resource_group,
                                                                     tenant_physics, tenant_chemistry):
    tenant_physics.quota.gpu_hours_budget = 500
    tenant_physics.quota.save()
    stored = _store(resource_group, tenant=tenant_physics, minutes=range(5, 15))
    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/")
    page.click("#charts button[data-range='1h']")
    quota = _data(page, "chart-quota-physics", 60)
    assert quota[1] == [stored.get(x, {}).get("tenant", 0) for x in quota[0]]
    assert set(quota[2]) == {64}  # max_gpus
    budget = _data(page, "chart-budget-physics", 60)
    hours = [stored.get(x, {}).get("tenant", 0) / 60 for x in budget[0]]  # a minute at g GPUs: g / 60 GPU-hours
    running = [sum(hours[: i + 1]) for i in range(len(hours))]
    assert budget[1] == pytest.approx(running, abs=1e-3) and set(budget[2]) == {500}
    # No allocation ran this month: none of its budget is used (the accounting's count, not the series).
    expect(page.locator("#chart-budget-physics .month-budget")).to_contain_text("0.00 GPU-hours of a budget of 500")
    ids = page.evaluate("Object.keys(window.latticeCharts).sort()")
    assert ids == ["chart-budget-physics", "chart-quota-physics"]
    assert "chemistry" not in page.content()
