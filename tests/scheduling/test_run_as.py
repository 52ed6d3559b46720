"""Who work runs as on the nodes: the tenant's Unix user, or a member's own where an operator set
one, edited through the API (audited, field errors on bad names, operators only) and carried by
the start frames a scheduler pass sends (one statement on PostgreSQL, the ORM on SQLite: whichever
the tests run on) and re-sent at a hello."""

from __future__ import annotations

import pytest

from nodes.actions import node_hello
from nodes.protocol import Hello
from scheduling.models import Membership, PolicyChange, Tenant
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db


def _patch(client, url, body):
    return client.patch(url, body, content_type="application/json")


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def carol(tenant_physics, django_user_model):
    user = django_user_model.objects.create_user("carol", password="pw-carol-123")
    return Membership.objects.create(user=user, tenant=tenant_physics)


def test_operators_map_a_tenant_and_one_of_its_members_each_change_audited(ops, tenant_physics, carol):
    done = _patch(ops, "/api/v1/run-as/tenants/physics/", {"unix_user": "physics", "unix_group": "hpc",
                                                           "reason": "the project's account"})
    assert done.status_code == 200, done.content
    assert done.json() == {"tenant": "physics", "unix_user": "physics", "unix_group": "hpc", "allow_root": False}
    done = _patch(ops, f"/api/v1/run-as/members/{carol.pk}/", {"unix_user": "carol", "reason": "her own files"})
    assert done.status_code == 200 and done.json()["unix_user"] == "carol" and done.json()["user"] == "carol"
    listed = ops.get("/api/v1/run-as/members/?tenant=physics").json()["results"]
    assert {m["user"]: m["unix_user"] for m in listed} == {"alice": "", "carol": "carol"}
    changes = list(PolicyChange.objects.order_by("id").values_list("action", "reason"))
    assert changes == [("edit", "the project's account"), ("edit", "her own files")]
    assert Membership.objects.get(pk=carol.pk).unix_user == "carol"


def test_bad_names_unknown_fields_and_missing_reasons_are_400_and_change_nothing(ops, tenant_physics, carol):
    url = f"/api/v1/run-as/members/{carol.pk}/"
    for body, field in (({"unix_user": "Carol Smith", "reason": "x"}, "unix_user"),
                        ({"unix_user": "x" * 33, "reason": "x"}, "unix_user"),
                        ({"unix_user": "carol"}, "reason"),
                        ({"unix_user": "carol", "tenant": "chemistry", "reason": "x"}, "tenant"),
                        ({"uid": 0, "reason": "x"}, "uid")):
        refused = _patch(ops, url, body)
        assert refused.status_code == 400 and field in refused.json(), (body, refused.content)
    assert Membership.objects.get(pk=carol.pk).unix_user == "" and not PolicyChange.objects.exists()


def test_a_mapping_to_root_needs_the_tenants_allow_root(ops, tenant_physics, carol):
    """Said up front, naming the field, rather than learnt from the agent's refusal at start."""
    for url, body, field in (("/api/v1/run-as/tenants/physics/", {"unix_user": "root"}, "unix_user"),
                             ("/api/v1/run-as/tenants/physics/", {"unix_group": "root"}, "unix_group"),
                             (f"/api/v1/run-as/members/{carol.pk}/", {"unix_user": "root"}, "unix_user")):
        refused = _patch(ops, url, {**body, "reason": "x"})
        assert refused.status_code == 400 and "allow_root" in refused.json()[field][0], (body, refused.content)
    assert Tenant.objects.get(pk=tenant_physics.pk).unix_user == "" and not PolicyChange.objects.exists()
    allowed = _patch(ops, "/api/v1/run-as/tenants/physics/", {"unix_user": "root", "allow_root": True, "reason": "x"})
    assert allowed.status_code == 200 and allowed.json()["unix_user"] == "root"
    assert _patch(ops, f"/api/v1/run-as/members/{carol.pk}/", {"unix_user": "root", "reason": "x"}).status_code == 200


def test_tenants_may_not_read_or_change_the_mapping(client, tenant_physics, carol):
    client.force_login(tenant_physics.memberships.get(user__username="alice").user)
    assert client.get("/api/v1/run-as/members/").status_code == 403
    assert _patch(client, "/api/v1/run-as/tenants/physics/", {"allow_root": True, "reason": "x"}).status_code == 403
    assert not Tenant.objects.get(pk=tenant_physics.pk).allow_root


def test_a_members_own_mapping_wins_for_the_work_they_submit(sent, tenant_physics, carol, node_gpu_a,
                                                             make_allocation, vcluster_hpc,
                                                             django_capture_on_commit_callbacks):
    Tenant.objects.filter(pk=tenant_physics.pk).update(unix_user="physics", unix_group="hpc")
    Membership.objects.filter(pk=carol.pk).update(unix_user="carol")
    alice = tenant_physics.memberships.get(user__username="alice").user
    hers = make_allocation(state="pending", node_count=1, per_node_gpu=1, vcluster=vcluster_hpc, user=carol.user)
    theirs = make_allocation(state="pending", node_count=1, per_node_gpu=1, vcluster=vcluster_hpc, user=alice)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass(node_gpu_a.resource_group_id)
    (start_hers,), (start_theirs,) = sent.starts(hers.pk), sent.starts(theirs.pk)
    assert (start_hers["user"], start_hers["group"]) == ("carol", "")  # her primary group on the node
    assert (start_theirs["user"], start_theirs["group"]) == ("physics", "hpc")
    # A hello that finds the start never arrived sends it again, for the same user.
    node_gpu_a.refresh_from_db()
    node_gpu_a.last_heartbeat_at = None
    node_gpu_a.save(update_fields=["last_heartbeat_at"])
    frames = node_hello(node=node_gpu_a, frame=Hello(id="h", agent_version="1", capacity={}, labels={},
                                                     running=[])).frames
    resent = {f["allocation"]: f["user"] for f in frames if f["type"] == "start"}
    assert resent == {str(hers.pk): "carol", str(theirs.pk): "physics"}


def test_the_leave_to_run_as_root_is_not_taken_back_while_a_member_maps_to_root(ops, tenant_physics, carol):
    """A member's mapping to root was allowed by the tenant's allow_root; turning that off would
    leave the mapping standing and the member's work refused at every start."""
    assert _patch(ops, "/api/v1/run-as/tenants/physics/", {"allow_root": True, "reason": "x"}).status_code == 200
    assert _patch(ops, f"/api/v1/run-as/members/{carol.pk}/", {"unix_group": "root", "reason": "x"}).status_code == 200
    refused = _patch(ops, "/api/v1/run-as/tenants/physics/", {"allow_root": False, "reason": "x"})
    assert refused.status_code == 400 and "carol" in refused.json()["allow_root"][0], refused.content
    assert Tenant.objects.get(pk=tenant_physics.pk).allow_root
    assert _patch(ops, f"/api/v1/run-as/members/{carol.pk}/", {"unix_group": "", "reason": "x"}).status_code == 200
    assert _patch(ops, "/api/v1/run-as/tenants/physics/", {"allow_root": False, "reason": "x"}).status_code == 200
