"""A tenant's job page follows its job without a reload."""

from __future__ import annotations

import json
import urllib.request

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.actions.tokens import api_token_issue

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_job_page_shows_a_cancellation_as_it_happens(login, live_server_url, resource_group, vcluster_hpc,
                                                         node_gpu_a, tenant_physics, make_allocation):
    running = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                              started_at=timezone.now())
    running.placements.create(node=node_gpu_a, gpu=8)
    waiting = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                              command=["sleep", "60"])
    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{waiting.pk}/")
    page.wait_for_function("document.body.dataset.live === 'on'", timeout=10_000)
    expect(page.locator("#job-state")).to_have_text("pending")
    page.evaluate("window.loadedOnce = true")

    token = api_token_issue(user=tenant_physics.memberships.first().user)
    request = urllib.request.Request(f"{live_server_url}/api/v1/allocations/{waiting.pk}/cancel/", data=b"{}",
                                     method="POST", headers={"Content-Type": "application/json",
                                                             "Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["state"] == "cancelled"
    expect(page.locator("#job-state")).to_have_text("cancelled", timeout=5_000)
    expect(page.locator("#job-story table tr", has_text="cancelled")).to_have_count(1)
    assert page.evaluate("window.loadedOnce") is True


def test_a_running_job_s_elapsed_time_and_gpu_hours_count_on_between_its_events(
        login, live_server_url, resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    from datetime import timedelta

    from scheduling.models import AllocationEvent

    started = timezone.now() - timedelta(minutes=3)
    running = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc, started_at=started)
    running.placements.create(node=node_gpu_a, gpu=8)
    event = AllocationEvent.objects.create(allocation=running, from_state="pending", to_state="running")
    AllocationEvent.objects.filter(pk=event.pk).update(created_at=started)
    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{running.pk}/")
    first = page.locator("#job-elapsed").inner_text()
    hours = float(page.locator("#job-gpu-hours").inner_text())
    assert first.startswith("3m ") and hours == pytest.approx(8 * 3 / 60, abs=0.01)
    page.wait_for_timeout(2_500)  # no event for it meanwhile
    later = page.locator("#job-elapsed").inner_text()
    assert later != first and later.startswith("3m ")
    assert int(later.split()[1][:-1]) > int(first.split()[1][:-1])  # the seconds went on
    assert float(page.locator("#job-gpu-hours").inner_text()) > hours  # 8 GPUs: 0.002 GPU-hours a second
