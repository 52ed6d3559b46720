"""Hostile or careless input on the pages (the portal and the console): a query parameter that is
not an id, a date past what the database stores, a forged formset, a cleared JSON box, a reason
with a NUL. Each is refused (or ignored, for a page's own cursor) and changes nothing, never a 500."""

from __future__ import annotations

import pytest

from scheduling.models import PolicyChange

pytestmark = pytest.mark.django_db

NOT_IDS = ["²", "١٢", "9" * 30, "-1"]


@pytest.mark.parametrize("value", NOT_IDS)
@pytest.mark.parametrize("name", ["before", "array"])
def test_portal_list_ignores_a_cursor_or_array_that_is_not_an_id(client, make_allocation, name, value):
    job = make_allocation(state="pending")
    client.force_login(job.user)
    response = client.get("/jobs/", {name: value})
    assert response.status_code == 200
    assert f'href="/jobs/{job.pk}/"' in response.content.decode()


@pytest.mark.parametrize("value", NOT_IDS)
def test_console_pages_ignore_an_id_parameter_that_is_not_one(client, operator, resource_group, value):
    client.force_login(operator)
    assert client.get("/ops/audit/", {"before": value}).status_code == 200
    assert client.get(f"/ops/groups/{resource_group.name}/policy/", {"evaluation": value}).status_code == 200


@pytest.mark.parametrize("until", ["0001-01-01 00:00:00+14:00", "9999-12-31 23:59:59-12:00", "2000-01-01 00:00"])
def test_protect_until_a_time_that_cannot_be_stored_or_has_passed_is_refused(client, operator, make_allocation,
                                                                             until):
    job = make_allocation(state="pending")
    client.force_login(operator)
    response = client.post(f"/ops/allocations/{job.pk}/override/",
                           {"action": "protect", "until": until, "reason": "deadline"})
    assert response.status_code == 400
    assert "until" in response.content.decode()
    job.refresh_from_db()
    assert job.protected_until is None and not PolicyChange.objects.exists()
