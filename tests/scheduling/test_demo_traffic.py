"""manage.py demo_traffic: demo tenants submit through the real API of a live server."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.models import Allocation, ApiToken


@pytest.mark.django_db(transaction=True)
def test_submits_through_the_api_as_each_tenant_and_revokes_its_tokens(live_server):
    call_command("seed_demo", stdout=io.StringIO())
    before = set(Allocation.objects.values_list("pk", flat=True))
    out = io.StringIO()
    call_command("demo_traffic", "--url", live_server.url, "--count", "20", "--interval", "0.01", "--seed", "7",
                 stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 20
    submitted = {int(m.group(1)): m.group(2) for line in lines
                 if (m := re.match(r"submitted #(\d+) \((\w+): ", line))}
    assert submitted, lines
    created = Allocation.objects.exclude(pk__in=before).select_related("tenant", "resource_group")
    assert {a.pk: a.tenant.name for a in created} == submitted  # as the tenant the line names, nothing else
    assert {a.resource_group.name for a in created} == {"gpu-main", "shared-east", "fair-west"}  # every model acts
    assert all(not re.match(r"server unreachable", line) for line in lines)
    assert not ApiToken.objects.filter(revoked_at__isnull=True).exists()


@pytest.mark.django_db
def test_refuses_bad_arguments_and_an_unseeded_database():
    with pytest.raises(CommandError) as error:
        call_command("demo_traffic", "--interval", "0", "--count", "1")
    # argparse's refusal: exit 2 from a shell (test_command_arguments), an error here
    assert "--interval: '0' is not a finite number of seconds above 0" in str(error.value)
    for url in ("ftp://x", "http://", "http://x:99999"):  # never reachable: it would retry for ever
        with pytest.raises(CommandError) as error:
            call_command("demo_traffic", "--url", url, "--count", "1")
        assert f"--url: '{url}' is not" in str(error.value)
    with pytest.raises(CommandError) as error:
        call_command("demo_traffic", "--count", "1")
    assert error.value.returncode == 2 and "seed_demo" in str(error.value)
