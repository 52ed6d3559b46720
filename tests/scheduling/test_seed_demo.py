from __future__ import annotations

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from nodes.models import Node
from scheduling.models import Allocation, ResourceGroup, SessionType, Tenant, VCluster

pytestmark = pytest.mark.django_db


def test_seed_demo_builds_the_demo_cluster_and_is_idempotent():
    call_command("seed_demo")
    counts = (ResourceGroup.objects.count(), Node.objects.count(), Allocation.objects.count())
    call_command("seed_demo")
    assert (ResourceGroup.objects.count(), Node.objects.count(), Allocation.objects.count()) == counts
    assert Node.objects.filter(gpu__gt=0, labels__has_key="switch").count() >= 48
    assert {p["kind"] for p in ResourceGroup.objects.values_list("policy", flat=True)} >= {"class_cost", "rank"}
    assert set(VCluster.objects.values_list("type", flat=True)) == {
        "hpc_batch", "ml_training", "service", "sensitive", "interactive"}
    assert SessionType.objects.values("rank").distinct().count() >= 3
    assert set(Tenant.objects.values_list("name", flat=True)) == {"physics", "chemistry", "biology"}
    assert all(hasattr(t, "quota") for t in Tenant.objects.all())
    op = authenticate(username="operator", password="lattice-operator")
    assert op is not None and op.is_staff
    assert authenticate(username="alice", password="lattice-demo").memberships.get().tenant.name == "physics"
