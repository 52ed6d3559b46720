"""Fair-share standing in the running system: tracking by the pass, the queue's order, and where
operators see it (group page, API, metrics); the new settings in the forms and the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scheduling.models import PolicyChange, Quota, ResourceGroup, Tenant, TenantShare, VCluster
from scheduling.passes.fairshare import Standing
from scheduling.passes.queue import pending_queue
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db

POLICY = {"kind": "fair_share", "starvation_timeout_s": 30, "aggressive_starvation_timeout_s": 120,
          "enable_aggressive": True}


@pytest.fixture
def fs_group(resource_group, vcluster_hpc, two_nodes, tenant_physics, tenant_chemistry):
    """rg-main as a fair_share group of two 8-GPU nodes; physics and chemistry have fair share 0.5."""
    resource_group.policy = POLICY
    resource_group.save()
    return resource_group


def _job(make_allocation, tenant, **kw):
    if "user" not in kw:
        kw["user"] = tenant.memberships.first().user
    return make_allocation(tenant=tenant, state="pending", node_count=1, per_node_gpu=8, checkpoint="auto", **kw)


def _row(tenant, group):
    return TenantShare.objects.get(tenant=tenant, resource_group=group)


def test_the_pass_marks_below_only_with_demand_and_clears_on_recovery(fs_group, make_allocation, tenant_physics,
                                                                      tenant_chemistry):
    ran = _job(make_allocation, tenant_chemistry)
    schedule_pass(fs_group.pk)
    schedule_pass(fs_group.pk)  # a pass measures what holds at its start
    # chemistry asked and got 0.5 (its fair share); physics holds nothing but asks for nothing
    assert _row(tenant_chemistry, fs_group).share == pytest.approx(0.5)
    assert _row(tenant_physics, fs_group).below_since is None
    t0 = timezone.now()
    _job(make_allocation, tenant_chemistry)  # chemistry takes the second node too
    schedule_pass(fs_group.pk, now=t0)
    waiting = _job(make_allocation, tenant_physics)
    schedule_pass(fs_group.pk, now=t0 + timedelta(seconds=1))
    row = _row(tenant_physics, fs_group)
    assert (row.share, row.below_since) == (0.0, t0 + timedelta(seconds=1))
    stamped = row.updated_at
    schedule_pass(fs_group.pk, now=t0 + timedelta(seconds=2))  # nothing moved: nothing written
    row = _row(tenant_physics, fs_group)
    assert (row.below_since, row.updated_at) == (t0 + timedelta(seconds=1), stamped)
    # the mark feeds the engine: 40 s later physics starves and takes chemistry's newest job
    result = schedule_pass(fs_group.pk, now=t0 + timedelta(seconds=41))
    assert result.preempted == 1
    ran.refresh_from_db()
    assert ran.state == "running"  # the older one is within chemistry's share
    waiting.delete()
    schedule_pass(fs_group.pk, now=t0 + timedelta(seconds=42))
    assert _row(tenant_physics, fs_group).below_since is None  # asks for nothing any more


def test_queue_puts_starving_tenants_first_then_by_deficit(fs_group, make_allocation, tenant_physics,
                                                           tenant_chemistry):
    biology = Tenant.objects.create(name="biology")
    Quota.objects.create(tenant=biology, fair_share=0.2)
    first = _job(make_allocation, tenant_physics)
    second = _job(make_allocation, tenant_chemistry)
    third = _job(make_allocation, biology, user=tenant_physics.memberships.first().user)
    now = timezone.now()

    def standing(tenant, share, fair, status):
        return Standing(tenant.name, share, fair, now if status != "normal" else None, status)

    order = pending_queue(fs_group, "fair_share", 10, set(), {
        tenant_physics.pk: standing(tenant_physics, 0.1, 0.5, "below_fair_share"),  # deficit 0.4
        tenant_chemistry.pk: standing(tenant_chemistry, 0.0, 0.5, "normal"),  # deficit 0.5
        biology.pk: standing(biology, 0.1, 0.2, "starving")})  # deficit 0.1, but starving
    assert [r["id"] for r in order] == [third.pk, second.pk, first.pk]
    # outside a pass (the group page) the tracked rows give the same order
    for tenant, share, fair, since in ((tenant_physics, 0.1, 0.5, None), (tenant_chemistry, 0.0, 0.5, None),
                                       (biology, 0.1, 0.2, now - timedelta(minutes=1))):
        TenantShare.objects.create(tenant=tenant, resource_group=fs_group, share=share, fair_share=fair,
                                   below_since=since, updated_at=now)
    assert [r["id"] for r in pending_queue(fs_group, "fair_share", 10)] == [third.pk, second.pk, first.pk]


@pytest.fixture
def tracked(fs_group, tenant_physics, tenant_chemistry):
    now = timezone.now()
    TenantShare.objects.create(tenant=tenant_physics, resource_group=fs_group, share=0.0, fair_share=0.5,
                               below_since=now - timedelta(seconds=60), updated_at=now)
    TenantShare.objects.create(tenant=tenant_chemistry, resource_group=fs_group, share=1.0, fair_share=0.5,
                               below_since=None, updated_at=now)
    return fs_group


def test_operators_see_shares_on_the_group_page_the_api_and_metrics(client, operator, tracked):
    client.force_login(operator)
    page = client.get("/ops/groups/rg-main/").content.decode()
    assert 'id="fair-share"' in page
    assert 'data-tenant="physics"><td>physics</td><td>0.000</td><td>0.500</td>' in page
    assert ">starving</span>" in page and ">normal</span>" in page
    body = client.get("/api/v1/resource-groups/rg-main/shares/").json()
    assert body["kind"] == "fair_share"
    assert [(s["tenant"], s["share"], s["status"], s["starving"]) for s in body["shares"]] == [
        ("chemistry", 1.0, "normal", False), ("physics", 0.0, "starving", True)]
    samples = {}
    for family in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for s in family.samples:
            samples[(s.name, s.labels.get("tenant"))] = s.value
    assert samples[("lattice_tenant_share", "chemistry")] == 1.0
    assert samples[("lattice_tenant_starving", "physics")] == 1.0
    assert samples[("lattice_tenant_starving", "chemistry")] == 0.0


def test_shares_are_for_operators_only(api_for, tracked):
    assert api_for("alice").get("/api/v1/resource-groups/rg-main/shares/").status_code == 403


def test_new_settings_are_validated_by_path_and_audited(client, operator, fs_group, vcluster_hpc):
    client.force_login(operator)
    bad = client.put("/api/v1/resource-groups/rg-main/policy/", {
        "policy": {**POLICY, "aggressive_starvation_timeout_s": 10}, "reason": "r"}, content_type="application/json")
    assert bad.status_code == 400 and "aggressive_starvation_timeout_s" in str(bad.json())
    good = client.put("/api/v1/resource-groups/rg-main/policy/", {
        "policy": {**POLICY, "preemptive_scheduling_backoff_s": 10, "non_preemptible_usage_threshold": 0.05},
        "reason": "calmer"}, content_type="application/json")
    assert good.status_code == 200
    assert ResourceGroup.objects.get(pk=fs_group.pk).policy["preemptive_scheduling_backoff_s"] == 10
    edited = client.patch(f"/api/v1/vclusters/{vcluster_hpc.pk}/", {"allow_aggressive_preemption": False,
                                                                    "reason": "prod SLAs"},
                          content_type="application/json")
    assert edited.status_code == 200 and edited.json()["allow_aggressive_preemption"] is False
    assert VCluster.objects.get(pk=vcluster_hpc.pk).allow_aggressive_preemption is False
    change = PolicyChange.objects.filter(target_type="scheduling.vcluster").get()
    assert (change.before["allow_aggressive_preemption"], change.after["allow_aggressive_preemption"]) == (True, False)
    form = client.get("/ops/groups/rg-main/policy/").content.decode()
    assert "policy_preemptive_scheduling_backoff_s" in form and "policy_non_preemptible_usage_threshold" in form
    form = client.post("/ops/groups/rg-main/policy/", {
        **{f"policy_{k}": v for k, v in POLICY.items()}, "policy_aggressive_starvation_timeout_s": "5",
        "policy_mode": "suspend", "policy_reclaim_rule": "any", "policy_victim_scope": "resource_group",
        "policy_preemption_order": "newest", "policy_near_completion_minutes": "5", "policy_min_runtime_minutes": "0",
        "policy_tolerance": "0.8", "policy_preemption_threshold": "1", "policy_aggressive_threshold": "0.2",
        "policy_checkpoint_timeout_minutes": "10", "policy_preemptive_scheduling_backoff_s": "5",
        "policy_non_preemptible_usage_threshold": "0", "policy_max_deferral_minutes": "5", "reason": "r",
        "action": "preview"})
    assert "must not be below starvation_timeout_s" in form.content.decode()
