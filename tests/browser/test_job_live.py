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
