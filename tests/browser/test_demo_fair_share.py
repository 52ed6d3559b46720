"""The demo's fair_share group (fair-west) in a real browser: biology, with nothing running and
work waiting, is shown below its fair share, then starving, on the group page that stays open
(its htmx refresh, no reload), as `make run` shows it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.models import ResourceGroup, TenantShare
from scheduling.passes.run import schedule_pass

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_demo_shows_a_tenant_going_from_below_its_share_to_starving_live(login, live_server_url):
    call_command("seed_demo")
    group = ResourceGroup.objects.get(name="fair-west")
    schedule_pass(group.pk)  # the embedded loop's first pass: biology is measured below its share
    page = login("operator", "lattice-operator")
    page.goto(f"{live_server_url}/ops/groups/fair-west/")
    status = page.locator("#fair-share tr[data-tenant=biology] .badge")
    expect(status).to_have_text("below fair share")
    page.evaluate("window.stillTheSamePage = true")
    # The demo's starvation timeout is 30 s: let it have passed rather than wait for it.
    TenantShare.objects.filter(resource_group=group, tenant__name="biology").update(
        below_since=timezone.now() - timedelta(seconds=31))
    expect(status).to_have_text("starving", timeout=20_000)  # a 5 s refresh (a loaded machine may miss one)
    assert page.evaluate("window.stillTheSamePage") is True
    expect(page.locator("#fair-share tr[data-tenant=physics] .badge")).to_have_text("normal")
