"""Database constraints: an invalid value is refused by the database, a valid one kept."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from nodes.models import Node
from scheduling.models import Membership, Quota, SessionType, Tenant, VCluster

pytestmark = pytest.mark.django_db


def _refused(make) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        make()


@pytest.mark.parametrize(
    ("field", "bad", "good"),
    [
        ("preemption_class", 11, 10),
        ("priority", 101, 100),
        ("node_count", 0, 1),
        ("walltime_minutes", 0, 0.5),
        ("checkpoint_minutes", -1, 0),
        ("value", -1, 0),
        ("state", "sleeping", "running"),
        ("checkpoint", "often", "manual"),
        ("requeue_policy", "maybe", "always"),
        ("per_node_gpu", -1, 0),
    ],
)
def test_allocation_constraint_refuses_bad_keeps_good(make_allocation, field, bad, good):
    _refused(lambda: make_allocation(**{field: bad}))
    alloc = make_allocation(**{field: good})
    alloc.refresh_from_db()
    assert getattr(alloc, field) == good


def test_session_type_rank_range(resource_group):
    _refused(lambda: SessionType.objects.create(resource_group=resource_group, name="r0", rank=0))
    _refused(lambda: SessionType.objects.create(resource_group=resource_group, name="r1", rank=10001))
    assert SessionType.objects.create(resource_group=resource_group, name="ok", rank=10000).rank == 10000


def test_session_type_and_vcluster_names_unique_per_resource_group(resource_group, vcluster_hpc):
    SessionType.objects.create(resource_group=resource_group, name="batch")
    _refused(lambda: SessionType.objects.create(resource_group=resource_group, name="batch"))
    _refused(lambda: VCluster.objects.create(resource_group=resource_group, name="hpc"))


def test_vcluster_borrow_pct_and_type(resource_group):
    _refused(lambda: VCluster.objects.create(resource_group=resource_group, name="a", max_borrow_pct=1.2))
    _refused(lambda: VCluster.objects.create(resource_group=resource_group, name="b", type="gaming"))
    assert VCluster.objects.create(resource_group=resource_group, name="c", max_borrow_pct=1.0).pk


def test_node_capacity_nonnegative_and_state_valid(resource_group):
    _refused(lambda: Node.objects.create(name="x1", resource_group=resource_group, gpu=-1))
    _refused(lambda: Node.objects.create(name="x2", resource_group=resource_group, state="melting"))
    assert Node.objects.create(name="x3", resource_group=resource_group, gpu=0).pk


def test_node_name_unique_and_not_borrowed_by_its_home(resource_group, vcluster_hpc, node_gpu_a):
    _refused(lambda: Node.objects.create(name="gpu-a", resource_group=resource_group))
    _refused(lambda: Node.objects.create(name="x4", resource_group=resource_group, vcluster=vcluster_hpc,
                                         borrowed_by=vcluster_hpc))


def test_quota_ranges(db):
    tenant = Tenant.objects.create(name="t")
    _refused(lambda: Quota.objects.create(tenant=tenant, max_preemption_class=11))
    _refused(lambda: Quota.objects.create(tenant=tenant, max_priority=101))
    _refused(lambda: Quota.objects.create(tenant=tenant, fair_share=1.5))
    _refused(lambda: Quota.objects.create(tenant=tenant, burst_allowance=-1))
    _refused(lambda: Quota.objects.create(tenant=tenant, max_gpus=-1))
    assert Quota.objects.create(tenant=tenant, max_preemption_class=10, max_priority=100, fair_share=1).pk


def test_tenant_name_and_membership_unique(tenant_physics, django_user_model):
    _refused(lambda: Tenant.objects.create(name="physics"))
    alice = django_user_model.objects.get(username="alice")
    _refused(lambda: Membership.objects.create(user=alice, tenant=tenant_physics))
    _refused(lambda: Membership.objects.create(user=alice, tenant=Tenant.objects.create(name="t2"), role="king"))
