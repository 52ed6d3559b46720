"""Attacks on tenant isolation and on operators' reach, channel by channel: each test names what a
reader must not learn or do, and checks it through the API and the pages alike."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.models import Allocation, PolicyChange

pytestmark = pytest.mark.django_db


def _pending(tenant, resource_group, vcluster, **fields):
    return Allocation.objects.create(
        resource_group=resource_group, vcluster=vcluster, tenant=tenant, user=tenant.memberships.first().user,
        submitted_at=timezone.now(), state="pending", node_count=1, per_node_gpu=8, command=["x"], **fields)


# -- usage: a tenant's name is not an oracle ---------------------------------------------------

def test_usage_answers_a_tenant_the_same_for_another_tenant_and_for_none(api_for, tenant_physics, tenant_chemistry):
    """Naming another tenant and naming one that does not exist must read alike to a member (403
    both): a 400 "no such tenant" for the one and a 403 for the other told which names exist."""
    alice = api_for("alice")
    real = alice.get("/api/v1/usage/?tenant=chemistry")
    made_up = alice.get("/api/v1/usage/?tenant=no-such-tenant")
    assert real.status_code == made_up.status_code == 403
    assert real.json() == made_up.json()
    assert alice.get("/api/v1/usage/?tenant=no-such-tenant&format=csv").status_code == 403
    assert alice.get("/api/v1/usage/?tenant=physics").status_code == 200


def test_operators_still_get_a_400_naming_the_tenant_that_does_not_exist(client, operator):
    client.force_login(operator)
    response = client.get("/api/v1/usage/?tenant=no-such-tenant")
    assert response.status_code == 400 and "tenant" in response.json()


# -- operators change policies, not tenants' work ----------------------------------------------

def test_an_operator_who_is_not_a_member_cannot_cancel_a_tenants_job(client, operator, tenant_physics,
                                                                      resource_group, vcluster_hpc):
    """The API and the page refuse it alike, saying why (the API once cancelled it, unaudited and
    with no reason; the page answered 404 for a job the operator can see)."""
    job = _pending(tenant_physics, resource_group, vcluster_hpc)
    client.force_login(operator)
    api = client.post(f"/api/v1/allocations/{job.pk}/cancel/")
    assert api.status_code == 403 and "only its tenant's members cancel work" in api.json()["detail"]
    page = client.post(f"/jobs/{job.pk}/cancel/", {"confirmed": "1"})
    assert page.status_code == 403 and "only its tenant&#x27;s members cancel work" in page.content.decode()
    job.refresh_from_db()
    assert job.state == "pending"
    # What operators may do to tenants' work stays open, each with a reason and audited.
    assert client.post(f"/api/v1/allocations/{job.pk}/hold/", {"reason": "bad input"},
                       content_type="application/json").status_code == 200
    assert PolicyChange.objects.filter(action="hold", reason="bad input").exists()


def test_an_operator_who_is_not_a_member_cannot_cancel_a_tenants_array(client, operator, api_for, tenant_physics,
                                                                        two_nodes):
    submitted = api_for("alice").post("/api/v1/allocations/", {
        "resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8}, "command": ["x"],
        "array": "0-2"}, content_type="application/json")
    assert submitted.status_code == 201, submitted.content
    array = submitted.json()["id"]
    client.force_login(operator)
    assert client.post(f"/api/v1/arrays/{array}/cancel/", {"reason": "x"},
                       content_type="application/json").status_code == 403
    assert set(Allocation.objects.filter(array_id=array).values_list("state", flat=True)) == {"pending"}
    assert client.post(f"/api/v1/arrays/{array}/hold/", {"reason": "maintenance"},
                       content_type="application/json").status_code == 200


def test_an_operator_who_is_a_member_cancels_as_a_member(client, operator, tenant_physics, resource_group,
                                                         vcluster_hpc):
    from scheduling.models import Membership

    membership = Membership.objects.create(user=operator, tenant=tenant_physics)
    job = _pending(tenant_physics, resource_group, vcluster_hpc)  # alice's
    client.force_login(operator)
    response = client.post(f"/api/v1/allocations/{job.pk}/cancel/")  # a plain member: not a colleague's
    assert response.status_code == 403 and "only the work they submitted" in response.json()["detail"]
    membership.role = "admin"
    membership.save()
    response = client.post(f"/api/v1/allocations/{job.pk}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"


# -- probes that found nothing, kept so they stay that way --------------------------------------

def test_another_tenants_ids_read_as_missing_ones_on_every_verb(api_for, tenant_physics, tenant_chemistry,
                                                                resource_group, vcluster_hpc):
    theirs = _pending(tenant_chemistry, resource_group, vcluster_hpc)
    missing = theirs.pk + 1000
    alice = api_for("alice")
    for verb in ("hold", "release", "cancel"):
        a = alice.post(f"/api/v1/allocations/{theirs.pk}/{verb}/", {}, content_type="application/json")
        b = alice.post(f"/api/v1/allocations/{missing}/{verb}/", {}, content_type="application/json")
        assert a.status_code == b.status_code == 404 and a.json() == b.json(), verb
        assert alice.post(f"/jobs/{theirs.pk}/{verb}/", {"confirmed": "1"}).status_code == 404
    assert alice.head(f"/api/v1/allocations/{theirs.pk}/").status_code == 404
    # A dependency on another tenant's job reads as one on a job that does not exist.
    body = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8}, "command": ["x"]}
    a = alice.post("/api/v1/allocations/", {**body, "depends_on": [{"type": "afterok", "job": theirs.pk}]},
                   content_type="application/json")
    b = alice.post("/api/v1/allocations/", {**body, "depends_on": [{"type": "afterok", "job": missing}]},
                   content_type="application/json")
    assert a.status_code == b.status_code == 400
    assert a.json()["depends_on"][0].replace(str(theirs.pk), "N") == b.json()["depends_on"][0].replace(
        str(missing), "N")
    assert Allocation.objects.get(pk=theirs.pk).state == "pending"


def test_an_agent_token_is_no_api_token(client, node_gpu_a, tenant_physics):
    from nodes.models import AgentToken

    token = AgentToken.issue(node=node_gpu_a)
    for scheme in ("Token", "Bearer"):
        assert client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"{scheme} {token}").status_code == 401


def test_the_admin_login_is_throttled_as_the_login_page_is(client, operator, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/admin/login/", {"username": "op", "password": "wrong", "next": "/admin/"})
    right = client.post("/admin/login/", {"username": "op", "password": "pw-op-123", "next": "/admin/"})
    assert right.status_code == 429


@pytest.mark.django_db(transaction=True)
def test_a_user_token_is_no_agent_token_and_an_agent_reports_for_its_own_node_only(
        operator, two_nodes, make_allocation, vcluster_hpc):
    import json

    from asgiref.sync import async_to_sync
    from channels.testing import WebsocketCommunicator

    from lattice_site.asgi import application
    from nodes.actions import agent_token_issue
    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Placement

    here, there = two_nodes
    elsewhere = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                                started_at=timezone.now(), ran_on=[there.name])
    Placement.objects.create(allocation=elsewhere, node=there, gpu=8)
    user_token, agent_token = api_token_issue(user=operator), agent_token_issue(node=here)

    def comm(token):
        return WebsocketCommunicator(application, "/ws/agent/",
                                     headers=[(b"authorization", f"Bearer {token}".encode())])

    async def scenario():
        refused = comm(user_token)
        await refused.connect()
        assert await refused.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
        await refused.disconnect()
        agent = comm(agent_token)
        connected, _ = await agent.connect()
        assert connected
        await agent.send_to(text_data=json.dumps({"type": "exited", "id": "e1", "allocation": str(elsewhere.pk),
                                                  "exit_code": 1, "reason": "failed"}))
        reply = json.loads(await agent.receive_from(timeout=5))
        await agent.disconnect()
        return reply

    reply = async_to_sync(scenario)()
    assert reply["type"] == "error" and reply["code"] == "NOT_ON_THIS_NODE"
    elsewhere.refresh_from_db()
    assert elsewhere.state == "running"
