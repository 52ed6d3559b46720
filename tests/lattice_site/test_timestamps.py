"""PostgreSQL timestamps read by the ISO loader: the instants written, as Django reads them (and right
even in a session whose time zone is not the connection's)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DataError, connection
from django.utils import timezone

from scheduling.models import AllocationEvent

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
UTC = dt.UTC


def _read(texts: list[str], session_zone: str = "UTC") -> list[dt.datetime]:
    with connection.cursor() as cursor:
        cursor.execute(f"SET TIME ZONE '{session_zone}'")
        try:
            cursor.execute("SELECT t::timestamptz FROM unnest(%s::text[]) WITH ORDINALITY AS x(t, n) ORDER BY n",
                           [texts])
            return [row[0] for row in cursor.fetchall()]
        finally:
            cursor.execute("SET TIME ZONE 'UTC'")


def test_values_are_the_instants_written_in_utc():
    texts = ["2026-11-24 09:15:47.123456+00", "2026-11-24 09:15:47+00", "2026-11-24 09:15:47.5+00",
             "2026-07-01 12:00:00+02", "1999-12-31 23:59:59.999999-05:30", "0001-01-01 00:00:00+00",
             "9999-12-31 23:59:59.999999+00"]
    expected = [dt.datetime(2026, 11, 24, 9, 15, 47, 123456, tzinfo=UTC), dt.datetime(2026, 11, 24, 9, 15, 47, tzinfo=UTC),
                dt.datetime(2026, 11, 24, 9, 15, 47, 500000, tzinfo=UTC), dt.datetime(2026, 7, 1, 10, 0, tzinfo=UTC),
                dt.datetime(2000, 1, 1, 5, 29, 59, 999999, tzinfo=UTC), dt.datetime(1, 1, 1, tzinfo=UTC),
                dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    values = _read(texts)
    assert values == expected
    assert all(v.utcoffset() == dt.timedelta(0) for v in values)


def test_a_session_in_another_zone_still_reads_the_same_instants():
    assert _read(["2026-11-24 09:15:47.123456+00"], "Asia/Kolkata") == [
        dt.datetime(2026, 11, 24, 9, 15, 47, 123456, tzinfo=UTC)]


@pytest.mark.parametrize("text", ["infinity", "-infinity", "10000-01-01 00:00:00+00", "0044-03-15 12:00:00+00 BC"])
def test_what_python_cannot_hold_is_refused_as_djangos_loader_refuses_it(text):
    with pytest.raises(DataError):
        _read([text])


def test_the_orm_reads_through_it():
    from django.contrib.auth import get_user_model

    from scheduling.models import Allocation, ResourceGroup, Tenant

    moment = dt.datetime(2026, 11, 24, 9, 15, 47, 123456, tzinfo=UTC)
    group = ResourceGroup.objects.create(name="ts", policy={"kind": "class_cost"})
    alloc = Allocation.objects.create(resource_group=group, tenant=Tenant.objects.create(name="ts"),
                                      user=get_user_model().objects.create_user("ts"), submitted_at=moment)
    event = AllocationEvent.objects.create(allocation=alloc, from_state="", to_state="pending", reason="x")
    assert Allocation.objects.get(pk=alloc.pk).submitted_at == moment
    assert abs(AllocationEvent.objects.get(pk=event.pk).created_at - timezone.now()) < dt.timedelta(minutes=1)
    from lattice_site.timestamps import TIMESTAMPTZ_OID, loader_for

    assert connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, 0) is loader_for(connection.timezone)
