"""Confirmations in a real browser: a dismissed confirm() sends nothing, an accepted one acts at
once (no second page); and every page shows the favicon from static/."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Membership, Tenant

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_cancel_and_pause_ask_with_confirm_and_act_only_when_accepted(login, live_server_url, operator,
                                                                      resource_group, tenant_physics):
    alice = tenant_physics.memberships.first().user
    job = Allocation.objects.create(resource_group=resource_group, tenant=tenant_physics, user=alice,
                                    submitted_at=alice.date_joined, per_node_gpu=8, command=["x"])
    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{job.pk}/")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.click("text=Cancel this job")
    page.wait_for_timeout(300)
    assert asked == [f"Cancel job #{job.pk}? Running work is stopped."]
    assert Allocation.objects.get(pk=job.pk).state == "pending"
    page.once("dialog", lambda d: d.accept())
    page.click("text=Cancel this job")
    page.wait_for_url(f"**/jobs/{job.pk}/")
    assert Allocation.objects.get(pk=job.pk).state == "cancelled"
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon and icon.startswith("/static/") and page.request.get(live_server_url + icon).ok

    Membership.objects.get_or_create(user=operator, tenant=Tenant.objects.get(name="physics"))
    ops = login("op", "pw-op-123")
    ops.goto(f"{live_server_url}/ops/groups/{resource_group.name}/")
    ops.fill("input[name=reason]", "incident")
    ops.once("dialog", lambda d: d.dismiss())
    ops.click("text=Pause preemption")
    ops.wait_for_timeout(300)
    assert not resource_group.__class__.objects.get(pk=resource_group.pk).paused
    ops.once("dialog", lambda d: d.accept())
    ops.click("text=Pause preemption")
    ops.wait_for_url(f"**/ops/groups/{resource_group.name}/")
    assert resource_group.__class__.objects.get(pk=resource_group.pk).paused
