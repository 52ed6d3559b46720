"""A filter out of range in any admin list is a bad filter (the admin's redirect to ``?e=1``),
never a 500 (on SQLite or PostgreSQL): integers past 64 bits in ``__in`` lookups, a date hierarchy past the calendar."""

from __future__ import annotations

import pytest
from django.contrib import admin

from lattice_site.admin_lists import VettedLists

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999999"  # past 2**63


@pytest.fixture
def root(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    return client


@pytest.mark.parametrize("url", [
    f"/admin/scheduling/allocation/?id__in={HUGE}",
    f"/admin/scheduling/allocation/?id__in=1,{HUGE}",
    f"/admin/scheduling/allocation/?priority__in=-{HUGE}",
    f"/admin/scheduling/allocationevent/?allocation__id__in={HUGE}",
    f"/admin/scheduling/preemptiondecision/?preemptor__id__in={HUGE}",
    f"/admin/nodes/node/?gpu__in={HUGE}",
    f"/admin/auth/user/?id__in={HUGE}",
    f"/admin/scheduling/allocation/?submitted_at__year={HUGE}",
    f"/admin/scheduling/allocation/?submitted_at__year=2026&submitted_at__month={HUGE}",
    "/admin/scheduling/allocation/?submitted_at__year=9999&submitted_at__month=12&submitted_at__day=31",
    "/admin/scheduling/allocation/?submitted_at__year=9999&submitted_at__month=12",
    "/admin/scheduling/policychange/?created_at__year=9999",
])
def test_a_filter_out_of_range_is_a_bad_filter_not_a_500(root, make_allocation, url):
    make_allocation(name="kept")
    response = root.get(url)
    # SQLite cannot bind the integer: a bad filter. PostgreSQL can, and lists nothing.
    assert response.status_code in (200, 302)
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1")
    else:
        assert "kept" not in response.content.decode()


def test_a_filter_in_range_still_lists(root, make_allocation):
    alloc = make_allocation(name="listed-one")
    other = make_allocation(name="left-out")
    page = root.get(f"/admin/scheduling/allocation/?id__in={alloc.pk},{HUGE[:18]}")
    assert page.status_code == 200
    assert "listed-one" in page.content.decode() and other.name not in page.content.decode()


def test_every_registered_admin_is_vetted():
    loose = [m._meta.label for m, a in admin.site._registry.items() if not isinstance(a, VettedLists)]
    assert loose == []
