"""The words tenants read: a what-if named as a request, a quota refusal as a sentence, another
tenant's preemption explained without a code word and with whose nodes they are."""

from __future__ import annotations

import pytest

from nodes.models import Node
from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import Allocation, VCluster
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db

FORM = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "gpus_per_node": 8, "preemption_class": 3,
        "priority": 10, "checkpoint": "auto", "command": "sleep 5"}


def test_what_if_names_the_request_not_its_placeholder_id(api_for, tenant_physics, two_nodes):
    body = api_for("alice").post("/api/v1/allocations/what-if/", {
        "resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8}, "command": ["x"]},
        content_type="application/json").json()
    assert body["explanation"].startswith("This request (class ") and "what-if" not in body["explanation"]


def test_a_quota_refusal_reads_as_a_sentence(client, tenant_physics, resource_group, two_nodes):
    quota = tenant_physics.quota
    quota.max_gpus = 4
    quota.save()
    client.force_login(tenant_physics.memberships.first().user)
    page = client.post("/jobs/new/", {**FORM, "action": "submit"}).content.decode()
    assert "__all__" not in page
    assert ("This job would pass your tenant&#x27;s hard quota on GPUs (max_gpus): the tenant&#x27;s work uses 0, "
            "this job needs 8 more, and the limit is 4.") in page
    assert not Allocation.objects.exists()


def test_a_reclaim_by_another_tenant_says_what_reclaim_means_and_whose_node(
        api_for, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, tenant_chemistry):
    ml = VCluster.objects.create(resource_group=resource_group, name="ml", max_borrow_pct=1.0)
    Node.objects.create(name="ml-a", resource_group=resource_group, vcluster=ml, gpu=8, cpu=64, memory=512,
                        state="ready")
    alice, bob = (t.memberships.first().user for t in (tenant_physics, tenant_chemistry))
    common = {"resource_group": resource_group, "node_count": 1, "per_node_gpu": 8, "checkpoint": "auto",
              "submitted_at": "2026-05-01T10:00:00Z", "state": "pending"}
    Allocation.objects.create(tenant=tenant_physics, user=alice, vcluster=vcluster_hpc, **common)
    guest = Allocation.objects.create(tenant=tenant_physics, user=alice, vcluster=vcluster_hpc, **common)
    schedule_pass(resource_group.pk)
    assert Allocation.objects.get(pk=guest.pk).ran_on == ["ml-a"]
    owner = Allocation.objects.create(tenant=tenant_chemistry, user=bob, vcluster=ml, **common)
    schedule_pass(resource_group.pk)
    allocation_checkpoint_done(allocation=Allocation.objects.get(pk=guest.pk), ok=True, location="/ckpt")
    shown = api_for("alice").get(f"/api/v1/allocations/{guest.pk}/explain/").json()["preemptions"][0]
    assert shown["explanation"] == (
        "Preempted to make room for a class-0 allocation of another tenant, which was placed on node ml-a: the "
        "node's home vCluster took back a node it had lent (reclaim).")
    assert str(owner.pk) not in shown["explanation"]
