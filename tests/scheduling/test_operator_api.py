"""The operators' configuration API: only operators, a reason for every change, every change
audited, bad input a 400 naming the field with nothing changed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Allocation, PolicyChange, Quota, ResourceGroup, SessionType, VCluster
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db

WRITES = [
    ("put", "/api/v1/resource-groups/rg-main/policy/", {"policy": {"kind": "priority"}, "reason": "r"}),
    ("post", "/api/v1/resource-groups/rg-main/preview/", {"policy": {"kind": "priority"}}),
    ("post", "/api/v1/vclusters/", {"resource_group": "rg-main", "name": "ml", "reason": "r"}),
    ("patch", "/api/v1/session-types/{st}/", {"priority": 5, "reason": "r"}),
    ("patch", "/api/v1/quotas/physics/", {"max_nodes": 1, "reason": "r"}),
    ("patch", "/api/v1/memberships/{member}/", {"max_priority": 1, "reason": "r"}),
    ("post", "/api/v1/overrides/pause/", {"resource_group": "rg-main", "reason": "r"}),
    ("post", "/api/v1/overrides/protect/", {"allocation": "{alloc}", "until": "2030-01-01T00:00:00Z",
                                            "reason": "r"}),
]
READS = ["/api/v1/resource-groups/", "/api/v1/vclusters/", "/api/v1/session-types/", "/api/v1/tenants/",
         "/api/v1/quotas/", "/api/v1/tenants/physics/", "/api/v1/memberships/"]


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def batch(resource_group):
    return SessionType.objects.create(resource_group=resource_group, name="batch")


def _call(client, method, path, body=None):
    return getattr(client, method)(path, body or {}, content_type="application/json")


def test_tenants_can_neither_read_nor_change_configuration(api_for, tenant_physics, resource_group, vcluster_hpc,
                                                          batch, make_allocation):
    alloc = make_allocation(state="pending", per_node_gpu=1)
    client = api_for("alice")
    for path in READS:
        assert client.get(path).status_code == 403, path
    for method, path, body in WRITES:
        path = path.format(st=batch.pk, member=tenant_physics.memberships.get().pk)
        body = {k: (str(alloc.pk) if v == "{alloc}" else v) for k, v in body.items()}
        assert _call(client, method, path, body).status_code == 403, path
    assert not PolicyChange.objects.exists()
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}
    assert Allocation.objects.get(pk=alloc.pk).protected_until is None


def test_operators_read_every_configuration_list(ops, tenant_physics, resource_group, vcluster_hpc, batch):
    for path in READS:
        assert ops.get(path).status_code == 200, path
    tenant = ops.get("/api/v1/tenants/physics/").json()
    assert tenant["quota"]["max_nodes"] == 8 and tenant["members"] == [
        {"user": "alice", "role": "member", "default_priority": None, "priority_changeable": True,
         "min_priority": None, "max_priority": None}]


def test_a_policy_change_needs_a_valid_policy_and_a_reason_and_is_audited(ops, resource_group):
    url = "/api/v1/resource-groups/rg-main/policy/"
    refused = _call(ops, "put", url, {"policy": {"kind": "lottery"}, "reason": "try"})
    assert refused.status_code == 400 and "kind" in refused.json()["policy"]
    refused = _call(ops, "put", url, {"policy": {"kind": "priority"}})
    assert refused.status_code == 400 and "reason" in refused.json()
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}
    assert not PolicyChange.objects.exists()

    done = _call(ops, "put", url, {"policy": {"kind": "priority", "max_victims": 2}, "reason": "nightly runs"})
    assert done.status_code == 200, done.content
    assert done.json()["policy"] == {"kind": "priority", "max_victims": 2}
    change = PolicyChange.objects.get()
    assert (change.action, change.reason, change.before["policy"], change.after["policy"]) == (
        "edit", "nightly runs", {"kind": "class_cost"}, {"kind": "priority", "max_victims": 2})


def test_a_policy_holds_only_numbers_it_can_store_send_and_date(ops, resource_group, vcluster_hpc, node_gpu_a,
                                                                   make_allocation):
    """1e308 was accepted, stored by jsonb as a 309-digit integer, and the group's page was a 500
    from then on; a checkpoint timeout of 1e15 minutes stopped every pass with an overflow."""
    url = "/api/v1/resource-groups/rg-main/policy/"
    for policy in ({"kind": "class_cost", "near_completion_minutes": 1e308},
                   {"kind": "class_cost", "checkpoint_timeout_minutes": 1e15}):
        refused = _call(ops, "put", url, {"policy": policy, "reason": "long"})
        assert refused.status_code == 400 and list(refused.json()["policy"]) == [next(iter(set(policy) - {"kind"}))]
    century = 100 * 365 * 24 * 60
    saved = _call(ops, "put", url, {"policy": {"kind": "class_cost", "checkpoint_timeout_minutes": century},
                                    "reason": "long"})
    assert saved.status_code == 200, saved.content
    victim = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                             vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=9, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    victim.refresh_from_db()
    assert victim.state == "checkpointing" and victim.deadline_at.year >= timezone.now().year + 99
    assert ops.get("/api/v1/resource-groups/rg-main/").json()["policy"]["checkpoint_timeout_minutes"] == century


def test_a_preview_shows_what_a_policy_would_make_preemptible_and_stores_nothing(
        ops, resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    running = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                              vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    before = Allocation.objects.get(pk=running.pk).started_at
    # min_runtime protects work that started less than an hour ago: it stops being preemptible.
    response = _call(ops, "post", "/api/v1/resource-groups/rg-main/preview/",
                     {"policy": {"kind": "class_cost", "min_runtime_minutes": 60}})
    assert response.status_code == 200, response.content
    assert response.json()["changed"] == [{"id": str(running.pk), "now": "preemptible", "after": "protected"}]
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}
    assert Allocation.objects.get(pk=running.pk).started_at == before
    assert not PolicyChange.objects.exists()


def test_vclusters_and_session_types_are_created_and_edited_with_checks_and_audit(ops, resource_group, batch):
    bad = _call(ops, "post", "/api/v1/vclusters/", {"resource_group": "rg-main", "name": "ml",
                                                     "max_borrow_pct": 1.5, "reason": "new team"})
    assert bad.status_code == 400 and "max_borrow_pct" in bad.json()
    assert not VCluster.objects.filter(name="ml").exists()

    made = _call(ops, "post", "/api/v1/vclusters/", {"resource_group": "rg-main", "name": "ml",
                                                      "type": "ml_training", "max_borrow_pct": 0.5,
                                                      "reason": "new team"})
    assert made.status_code == 201, made.content
    again = _call(ops, "post", "/api/v1/vclusters/", {"resource_group": "rg-main", "name": "ml", "reason": "x"})
    assert again.status_code == 400  # one name per group

    edited = _call(ops, "patch", f"/api/v1/session-types/{batch.pk}/", {"mode": "terminate", "rank": 20,
                                                                          "reason": "scratch work"})
    assert edited.status_code == 200, edited.content
    assert SessionType.objects.get(pk=batch.pk).mode == "terminate"
    bad = _call(ops, "patch", f"/api/v1/session-types/{batch.pk}/", {"rank": 20000, "reason": "too far"})
    assert bad.status_code == 400 and "rank" in bad.json()
    assert SessionType.objects.get(pk=batch.pk).rank == 20
    assert list(PolicyChange.objects.order_by("id").values_list("action", "target_type", "reason")) == [
        ("create", "scheduling.vcluster", "new team"), ("edit", "scheduling.sessiontype", "scratch work")]


def test_a_session_type_may_preempt_only_queues_of_its_group(ops, resource_group, batch):
    """The pass reads ``preempts`` as it is stored: a misspelt queue silently preempted nothing."""
    made = _call(ops, "post", "/api/v1/session-types/", {"resource_group": "rg-main", "name": "urgent",
                                                         "priority": 10, "preemptive": True,
                                                         "preempts": ["batchh"], "reason": "deadline"})
    assert made.status_code == 400
    assert "unknown session type 'batchh'" in made.json()["preempts"][0]
    assert not SessionType.objects.filter(name="urgent").exists()
    made = _call(ops, "post", "/api/v1/session-types/", {"resource_group": "rg-main", "name": "urgent",
                                                         "priority": 10, "preemptive": True,
                                                         "preempts": [{"queue": batch.name, "pref": 1}],
                                                         "reason": "deadline"})
    assert made.status_code == 201, made.content
    edit = _call(ops, "patch", f"/api/v1/session-types/{made.json()['id']}/", {"preempts": ["nope"], "reason": "x"})
    assert edit.status_code == 400 and "preempts" in edit.json()
    assert SessionType.objects.get(name="urgent").preempts == [{"queue": batch.name, "pref": 1}]


def test_quotas_are_edited_by_tenant_name_within_their_ranges(ops, tenant_physics):
    bad = _call(ops, "patch", "/api/v1/quotas/physics/", {"fair_share": 2, "reason": "more"})
    assert bad.status_code == 400 and "fair_share" in bad.json()
    done = _call(ops, "patch", "/api/v1/quotas/physics/", {"max_gpus": 128, "reason": "new grant"})
    assert done.status_code == 200 and done.json()["max_gpus"] == 128
    assert Quota.objects.get(tenant=tenant_physics).max_gpus == 128
    change = PolicyChange.objects.get()
    assert (change.before["max_gpus"], change.after["max_gpus"], change.reason) == (64, 128, "new grant")


def test_a_field_the_api_only_shows_is_refused_not_ignored(ops, tenant_physics, tenant_chemistry):
    """A quota's ``tenant`` (and ``id``) are shown, never set: sending them was answered 200 with
    nothing changed, as if the move had been made."""
    moved = _call(ops, "patch", "/api/v1/quotas/physics/", {"tenant": "chemistry", "id": 999, "max_gpus": 1,
                                                            "reason": "move"})
    assert moved.status_code == 400
    assert moved.json() == {"id": ["read-only: not changed here"],
                            "tenant": ["read-only: not changed here"]}
    assert Quota.objects.get(tenant=tenant_physics).max_gpus == 64
    assert not PolicyChange.objects.exists()


def test_overrides_protect_force_preempt_and_pause_each_with_a_reason(ops, resource_group, vcluster_hpc, node_gpu_a,
                                                                     make_allocation):
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc)
    until = timezone.now() + timedelta(hours=2)
    assert _call(ops, "post", "/api/v1/overrides/protect/", {"allocation": job.pk, "until": until.isoformat()}
                 ).status_code == 400  # no reason
    protected = _call(ops, "post", "/api/v1/overrides/protect/", {"allocation": job.pk, "until": until.isoformat(),
                                                                   "reason": "demo at noon"})
    assert protected.status_code == 200
    assert Allocation.objects.get(pk=job.pk).protected_until == until

    early = _call(ops, "post", "/api/v1/overrides/force-preempt/", {"allocation": job.pk, "reason": "maintenance"})
    assert early.status_code == 409  # still pending: nothing to preempt
    schedule_pass(resource_group.pk)
    forced = _call(ops, "post", "/api/v1/overrides/force-preempt/", {"allocation": job.pk, "reason": "maintenance"})
    assert forced.status_code == 200 and forced.json()["state"] == "checkpointing"

    paused = _call(ops, "post", "/api/v1/overrides/pause/", {"resource_group": "rg-main", "reason": "incident"})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    resumed = _call(ops, "post", "/api/v1/overrides/resume/", {"resource_group": "rg-main", "reason": "resolved"})
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert list(PolicyChange.objects.order_by("id").values_list("action", "reason")) == [
        ("protect", "demo at noon"), ("force_preempt", "maintenance"), ("pause", "incident"),
        ("resume", "resolved")]


def test_a_vcluster_cannot_move_to_another_resource_group(ops, resource_group, vcluster_hpc):
    ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    moved = _call(ops, "patch", f"/api/v1/vclusters/{vcluster_hpc.pk}/", {"resource_group": "rg-other",
                                                                           "reason": "tidy up"})
    assert moved.status_code == 400 and "resource_group" in moved.json()
    assert VCluster.objects.get(pk=vcluster_hpc.pk).resource_group_id == resource_group.pk
    same = _call(ops, "patch", f"/api/v1/vclusters/{vcluster_hpc.pk}/", {"resource_group": "rg-main",
                                                                          "allow_lending": False, "reason": "r"})
    assert same.status_code == 200 and same.json()["allow_lending"] is False


@pytest.mark.parametrize("until", ["2001-01-01T00:00:00Z", "0001-01-01T00:00:00+14:00",
                                   "9999-12-31T23:59:59-12:00"])
def test_protection_until_a_time_past_or_unstorable_is_refused(ops, vcluster_hpc, make_allocation, until):
    """A past time protects nothing (it was audited as a protection); near year 1 or 9999 an
    offset carries the time out of what the database stores in UTC (a 500)."""
    job = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                          started_at=timezone.now())
    refused = _call(ops, "post", "/api/v1/overrides/protect/", {"allocation": job.pk, "until": until,
                                                                 "reason": "demo"})
    assert refused.status_code == 400 and list(refused.json()) == ["until"]
    assert Allocation.objects.get(pk=job.pk).protected_until is None
    assert not PolicyChange.objects.exists()


def test_ended_work_cannot_be_protected(ops, vcluster_hpc, make_allocation):
    job = make_allocation(state="completed", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    until = timezone.now() + timedelta(hours=2)
    refused = _call(ops, "post", "/api/v1/overrides/protect/", {"allocation": job.pk, "until": until.isoformat(),
                                                                 "reason": "too late"})
    assert refused.status_code == 409
    assert Allocation.objects.get(pk=job.pk).protected_until is None
    assert not PolicyChange.objects.exists()
