"""The tenant API: admission errors, quotas, tokens, and tenant isolation on every endpoint."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from scheduling.models import Allocation, AllocationEvent, ApiToken
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
       "preemption_class": 3, "checkpoint": "auto", "command": ["sleep", "60"]}


def _submit(client, **over):
    return client.post("/api/v1/allocations/", {**JOB, **over}, content_type="application/json")


def test_submit_stores_pending_and_the_next_pass_places_it(api_for, tenant_physics, two_nodes, resource_group):
    response = _submit(api_for("alice"))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["tenant"] == "physics" and body["nodes"] == 1 and body["per_node"] == {"gpu": 8.0}
    assert body["state"] == "pending"
    schedule_pass(resource_group.pk)
    alloc = Allocation.objects.get(pk=body["id"])
    assert alloc.state == "running"
    assert list(alloc.placements.values_list("node__name", flat=True)) == ["gpu-a"]


@pytest.mark.parametrize(("over", "field"), [
    ({"preemption_class": 11}, "preemption_class"),
    ({"priority": -1}, "priority"),
    ({"per_node": {"tpu": 1}}, "per_node"),
    ({"vcluster": "nope"}, "vcluster"),
    ({"session_type": "nope"}, "session_type"),
    ({"nodes": 0}, "nodes"),
    ({"checkpoint": "sometimes"}, "checkpoint"),
    ({"resource_group": "elsewhere"}, "resource_group"),
    ({"walltime_minutes": 1e308}, "walltime_minutes"),  # at most a century: a start estimate dates it
])
def test_invalid_submission_is_400_with_field_errors_and_stores_nothing(api_for, tenant_physics, two_nodes,
                                                                         over, field):
    response = _submit(api_for("alice"), **over)
    assert response.status_code == 400
    assert field in response.json()
    assert not Allocation.objects.exists()


def test_class_and_priority_must_be_within_the_tenant_contract(api_for, tenant_physics, two_nodes):
    quota = tenant_physics.quota
    quota.max_preemption_class, quota.max_priority = 5, 50
    quota.save()
    response = _submit(api_for("alice"), preemption_class=6, priority=51)
    assert response.status_code == 400
    assert set(response.json()) == {"preemption_class", "priority"}


def _one_job_under_a_12_gpu_quota(api_for, tenant):
    """alice's client, with one 8-GPU job submitted under a 12-GPU quota: a second would pass it."""
    quota = tenant.quota
    quota.max_gpus = 12
    quota.save()
    client = api_for("alice")
    assert _submit(client).status_code == 201
    return client, quota


def test_quota_exceeded_is_409_naming_current_requested_and_limit(api_for, tenant_physics, two_nodes):
    client, _ = _one_job_under_a_12_gpu_quota(api_for, tenant_physics)
    response = _submit(client)
    assert response.status_code == 409
    expected = {"error": "quota_exceeded", "quota": "max_gpus", "current": 8, "requested": 8, "limit": 12}
    assert {k: response.json()[k] for k in expected} == expected
    assert Allocation.objects.count() == 1
    assert AllocationEvent.objects.count() == 1  # the refused one's row and event rolled back together


def test_what_if_answers_a_request_past_the_hard_quota_as_its_submission_would(api_for, tenant_physics, two_nodes):
    """The nodes are free, so the engine alone says it fits; the submission is refused with a 409
    naming the quota, and so is the what-if."""
    client, quota = _one_job_under_a_12_gpu_quota(api_for, tenant_physics)
    refused = _submit(client)
    what_if = client.post("/api/v1/allocations/what-if/", JOB, content_type="application/json")
    assert refused.status_code == what_if.status_code == 409
    assert what_if.json() == refused.json()
    quota.max_gpus = 16
    quota.save()
    assert client.post("/api/v1/allocations/what-if/", JOB, content_type="application/json").json()["outcome"] == "fits"
    assert Allocation.objects.count() == 1


def test_other_tenants_allocation_is_404_on_every_endpoint(api_for, tenant_physics, tenant_chemistry, two_nodes,
                                                           resource_group):
    alloc_id = _submit(api_for("alice")).json()["id"]
    schedule_pass(resource_group.pk)
    bob = api_for("bob")
    for suffix in ("", "events/", "explain/"):
        assert bob.get(f"/api/v1/allocations/{alloc_id}/{suffix}").status_code == 404, suffix
    assert bob.post(f"/api/v1/allocations/{alloc_id}/cancel/").status_code == 404
    assert bob.get("/api/v1/allocations/").json()["results"] == []
    assert Allocation.objects.get(pk=alloc_id).state == "running"


def test_list_is_scoped_filtered_and_a_fixed_number_of_queries(api_for, tenant_physics, two_nodes,
                                                               make_allocation, django_assert_max_num_queries):
    for _ in range(30):
        make_allocation(state="completed")
    client = api_for("alice")
    with django_assert_max_num_queries(6):
        body = client.get("/api/v1/allocations/?state=completed").json()
    assert len(body["results"]) == 30
    assert client.get("/api/v1/allocations/?state=running").json()["results"] == []


def test_cancel_pending_work_and_refuse_twice(api_for, tenant_physics, two_nodes, make_allocation):
    alloc = make_allocation(state="pending", node_count=1, per_node_gpu=8)
    client = api_for("alice")
    response = client.post(f"/api/v1/allocations/{alloc.pk}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert client.post(f"/api/v1/allocations/{alloc.pk}/cancel/").status_code == 409


def test_api_token_command_prints_token_alone_on_last_line(client, tenant_physics):
    out = io.StringIO()
    call_command("api_token", "alice", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip().splitlines()[-1]
    assert client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200


def test_token_authentication_accepts_issued_token_and_rejects_others(client, tenant_physics, two_nodes):
    from django.contrib.auth import get_user_model

    from scheduling.actions.tokens import api_token_issue

    alice = get_user_model().objects.get(username="alice")
    token = api_token_issue(user=alice)
    stored = ApiToken.objects.get(user=alice)
    assert token not in (stored.digest, stored.prefix) and len(stored.digest) == 64
    ok = client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {token}")
    assert ok.status_code == 200
    bad = client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {token[:-2]}xx")
    assert bad.status_code == 401
    stored.revoked_at = stored.created_at
    stored.save()
    assert client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401


def test_a_token_scopes_its_user_to_exactly_their_tenants(client, tenant_physics, tenant_chemistry,
                                                          make_allocation, django_user_model):
    """Token requests learn the user's tenants with the token: a member of two tenants sees
    both tenants' work, a member of none sees nothing, and an inactive user is refused."""
    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Membership, Tenant

    physics_job = make_allocation(name="p")
    chemistry_job = make_allocation(name="c", tenant=tenant_chemistry,
                                    user=django_user_model.objects.get(username="bob"))
    other = Tenant.objects.create(name="biology")
    biology_job = make_allocation(name="b", tenant=other)
    carol = django_user_model.objects.create_user("carol")
    Membership.objects.create(user=carol, tenant=tenant_physics)
    Membership.objects.create(user=carol, tenant=tenant_chemistry)
    nobody = django_user_model.objects.create_user("dave")

    def ids(token):
        response = client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {token}")
        assert response.status_code == 200
        return {row["id"] for row in response.json()["results"]}

    carol_token = api_token_issue(user=carol)
    assert ids(carol_token) == {physics_job.pk, chemistry_job.pk}
    assert client.get(f"/api/v1/allocations/{biology_job.pk}/",
                      HTTP_AUTHORIZATION=f"Token {carol_token}").status_code == 404
    assert ids(api_token_issue(user=nobody)) == set()
    carol.is_active = False
    carol.save()
    assert client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {carol_token}").status_code == 401


def test_what_if_stores_nothing_and_hides_other_tenants(api_for, tenant_physics, tenant_chemistry, two_nodes,
                                                        resource_group):
    assert _submit(api_for("bob"), preemption_class=1).status_code == 201
    assert _submit(api_for("bob"), preemption_class=1).status_code == 201
    schedule_pass(resource_group.pk)
    before = Allocation.objects.count()
    body = api_for("alice").post("/api/v1/allocations/what-if/", {**JOB, "preemption_class": 5},
                                 content_type="application/json").json()
    assert Allocation.objects.count() == before
    assert body["outcome"] == "preempt"
    assert body["victims"] == [{"id": None, "tenant": "another tenant", "reason": "priority",
                                "action": "checkpoint"}]
    assert body["candidates"] == [] and body["other_candidates"] == 2


def test_schema_is_served(client, operator):
    client.force_login(operator)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/allocations/what-if/" in response.content


def test_hand_written_allocation_output_equals_the_generic_one(tenant_physics, two_nodes, resource_group,
                                                              make_allocation, vcluster_hpc):
    from django.utils import timezone

    from scheduling.api.serializers import AllocationOutput

    running = make_allocation(state="running", node_count=2, per_node_gpu=4, vcluster=vcluster_hpc,
                              started_at=timezone.now(), protected_until=timezone.now(), env={"A": "1"},
                              command=["python", "train.py"], value=2.5, constraints={"labels": {"s": "1"}})
    pending = make_allocation(state="pending")
    rows = {row["id"]: row for row in Allocation.objects.filter(pk__in=[running.pk, pending.pk])
            .values(*AllocationOutput.columns())}
    for alloc in Allocation.objects.filter(pk__in=[running.pk, pending.pk]):
        out = AllocationOutput(alloc)
        assert out.data == out.generic_representation(alloc)
        assert AllocationOutput.from_row(rows[alloc.pk]) == out.data


def test_schema_documents_every_endpoint_without_warnings(tmp_path):
    import yaml

    call_command("spectacular", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    paths = yaml.safe_load((tmp_path / "schema.yaml").read_text())["paths"]
    for path in ("/api/v1/resource-groups/{name}/policy/", "/api/v1/vclusters/", "/api/v1/quotas/{tenant}/",
                 "/api/v1/overrides/force-preempt/", "/api/v1/tokens/", "/api/v1/nodes/{name}/drain/"):
        assert path in paths, path
