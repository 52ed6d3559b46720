"""A tenant's job page in a real browser: why the job waits and where it stands in the queue."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.models import Allocation, Placement

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_job_page_shows_the_binding_limit_and_the_queue_position(
        login, live_server_url, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, tenant_chemistry,
        make_allocation):
    running = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=1,
                              vcluster=vcluster_hpc, started_at=timezone.now())
    Placement.objects.create(allocation=running, node=node_gpu_a, gpu=8)
    bob = tenant_chemistry.memberships.first().user
    theirs = Allocation.objects.create(resource_group=resource_group, tenant=tenant_chemistry, user=bob,
                                       vcluster=vcluster_hpc, state="pending", node_count=1, per_node_gpu=8,
                                       preemption_class=5, submitted_at=timezone.now())
    mine = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=3, vcluster=vcluster_hpc)
    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{mine.pk}/")
    place = page.locator(".queue-position").inner_text()
    assert "Position 2 of 2 in the queue of rg-main: 1 ahead (1 by score)." in place
    reason = page.locator(".reason").inner_text()
    assert reason.startswith("RESOURCES Not enough free capacity where it may run")
    assert f"#{theirs.pk}" not in page.content() and "chemistry" not in page.content()
