"""A tenant's job page follows its job without a reload."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.actions.tokens import api_token_issue
from scheduling.models import AllocationEvent

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
    expect(page.locator("#job-state")).to_have_text("cancelled", timeout=15_000)
    expect(page.locator("#job-story table tr", has_text="cancelled")).to_have_count(1)
    assert page.evaluate("window.loadedOnce") is True


def test_a_running_jobs_elapsed_time_and_gpu_hours_count_on_between_events(login, live_server_url, resource_group,
                                                                          vcluster_hpc, node_gpu_a, make_allocation):
    """No event comes while a job simply runs: the page counts on by itself from the server's
    figures (30 minutes, 8 GPUs: 4 GPU-hours), and a finished job's figures stand still."""
    started = timezone.now() - timedelta(minutes=30)
    running = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                              started_at=started)
    running.placements.create(node=node_gpu_a, gpu=8)
    AllocationEvent.objects.filter(pk=AllocationEvent.objects.create(allocation=running, to_state="running").pk
                                   ).update(created_at=started)
    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{running.pk}/")
    first, hours = _figures(page)
    # At most what ran until it was read (a loaded machine takes seconds to log in and load the
    # page): 8 GPUs for that long, to three places.
    ran = (timezone.now() - started).total_seconds()
    assert re.fullmatch(r"30m \d\ds", first) and _seconds(first) <= ran
    assert 4.0 <= hours <= 8 * ran / 3600 + 0.0005
    # It counts on by itself: two seconds more, and 8 GPUs for them, 0.0044 GPU-hours (shown to
    # three places, so at least 0.004 more). Read until it has, as a timer of a busy browser may
    # fire late; never more than has run.
    deadline = time.monotonic() + 20
    while True:
        later, later_hours = _figures(page)
        ran = (timezone.now() - started).total_seconds()
        assert _seconds(later) <= ran and later_hours <= 8 * ran / 3600 + 0.0005, (later, later_hours, ran)
        if _seconds(later) - _seconds(first) >= 2 and later_hours >= hours + 0.004:
            break
        assert time.monotonic() < deadline, f"not counting on: {first} {hours} then {later} {later_hours}"
        page.wait_for_timeout(250)

    done = make_allocation(state="completed", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                           started_at=started, ended_at=started + timedelta(minutes=10))
    page.goto(f"{live_server_url}/jobs/{done.pk}/")
    expect(page.locator("#job-elapsed")).to_have_text("10m 00s")
    page.wait_for_timeout(1_500)
    expect(page.locator("#job-elapsed")).to_have_text("10m 00s")


def _figures(page) -> tuple[str, float]:
    """The elapsed time and GPU-hours the page shows now."""
    return page.locator("#job-elapsed").inner_text(), float(page.locator("#job-gpu-hours").inner_text())


def _seconds(text: str) -> int:
    m = re.fullmatch(r"(?:(\d+)h )?(\d+)m (\d\d)s", text)
    assert m, text
    return int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
