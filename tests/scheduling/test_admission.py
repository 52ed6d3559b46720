"""Admission refuses what could never run well: a start frame the agent protocol cannot carry,
work with nothing to run, work no node could ever hold, and opting out of preemption without
an operator's leave. Each refusal is a 400 naming the field, and nothing is stored."""

from __future__ import annotations

import orjson
import pytest

from nodes.models import Node
from nodes.protocol import MAX_FRAME_BYTES
from scheduling.actions.starts import start_frame
from scheduling.models import Allocation, PolicyChange, VCluster
from scheduling.web.portal import SubmitForm

pytestmark = pytest.mark.django_db

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
       "preemption_class": 3, "checkpoint": "auto", "command": ["sleep", "60"]}


def _submit(client, path="/api/v1/allocations/", **over):
    job = {**JOB, **over}
    return client.post(path, {k: v for k, v in job.items() if v is not ...}, content_type="application/json")


def _refused(response, field):
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Allocation.objects.exists()
    return " ".join(str(m) for m in response.json()[field])


# -- the start frame must fit the agent protocol -------------------------------------------------

def test_an_env_whose_start_frame_the_protocol_cannot_carry_is_refused(api_for, tenant_physics, two_nodes):
    env = {f"K{i}": "x" * 4000 for i in range(400)}  # each value allowed, 1.6 MB together
    message = _refused(_submit(api_for("alice"), env=env), "env")
    assert "bytes" in message


def test_a_command_whose_start_frame_the_protocol_cannot_carry_is_refused(api_for, tenant_physics, two_nodes):
    _refused(_submit(api_for("alice"), command=["y" * 4000] * 200), "command")


def test_what_admission_accepts_gives_a_start_frame_within_the_protocol_limit(api_for, tenant_physics, two_nodes):
    client = api_for("alice")
    accepted = None
    for keys in range(1, 200):  # grow the env until admission refuses it
        response = _submit(client, env={f"K{i}": "é" * 1000 for i in range(keys)})
        if response.status_code != 201:
            assert "env" in response.json()
            break
        accepted = Allocation.objects.get(pk=response.json()["id"])
        Allocation.objects.all().delete()
    assert accepted is not None and keys > 2
    frame = {"type": "start", **start_frame(accepted, "gpu-a").__dict__}
    assert len(orjson.dumps(frame)) < MAX_FRAME_BYTES


# -- something to run ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", [[], ...])
def test_work_without_a_command_is_refused(api_for, tenant_physics, two_nodes, command):
    _refused(_submit(api_for("alice"), command=command), "command")


def test_a_what_if_needs_no_command(api_for, tenant_physics, two_nodes):
    response = _submit(api_for("alice"), "/api/v1/allocations/what-if/", command=...)
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("per_node", [{}, {"gpu": 0, "cpu": 0, "memory": 0}])
def test_work_that_asks_for_no_resources_is_refused(api_for, tenant_physics, two_nodes, per_node):
    _refused(_submit(api_for("alice"), per_node=per_node), "per_node")


# -- a node that could hold it ------------------------------------------------------------------

def test_more_of_a_resource_than_any_node_has_is_refused_naming_it(api_for, tenant_physics, two_nodes):
    message = _refused(_submit(api_for("alice"), per_node={"gpu": 16}), "per_node")
    assert "gpu" in message and "16" in message and "8" in message and "rg-main" in message


def test_more_nodes_than_could_hold_it_is_refused(api_for, tenant_physics, two_nodes):
    message = _refused(_submit(api_for("alice"), nodes=3), "nodes")
    assert "2" in message


def test_a_vcluster_that_can_never_reach_a_big_enough_node_is_refused(api_for, tenant_physics, two_nodes,
                                                                      resource_group):
    big = VCluster.objects.create(resource_group=resource_group, name="big", allow_lending=False)
    Node.objects.create(name="gpu-big", resource_group=resource_group, vcluster=big, gpu=16, state="ready")
    client = api_for("alice")
    message = _refused(_submit(client, per_node={"gpu": 16}), "per_node")
    assert "hpc" in message
    assert _submit(client, per_node={"gpu": 16}, vcluster="big").status_code == 201
    Allocation.objects.all().delete()
    VCluster.objects.filter(pk=big.pk).update(allow_lending=True)  # lends at most 20 % of one node: none
    _refused(_submit(client, per_node={"gpu": 16}), "per_node")
    VCluster.objects.filter(pk=big.pk).update(max_borrow_pct=1.0)  # now hpc may borrow it
    assert _submit(client, per_node={"gpu": 16}).status_code == 201


def test_a_drained_node_still_counts_as_one_that_could_hold_it(api_for, tenant_physics, two_nodes):
    Node.objects.filter(name="gpu-b").update(state="drained")
    assert _submit(api_for("alice"), nodes=2).status_code == 201


def test_labels_no_node_carries_are_refused_naming_them(api_for, tenant_physics, two_nodes):
    client = api_for("alice")
    message = _refused(_submit(client, constraints={"labels": {"switch": "s9"}}), "constraints")
    assert "switch=s9" in message and "rg-main" in message
    _refused(_submit(client, constraints={"labels": {"gpu_model": "h100"}}), "constraints")
    _refused(_submit(client, constraints={"same": "rack"}), "constraints")
    assert _submit(client, constraints={"labels": {"switch": "s1"}}, nodes=2).status_code == 201


def test_labels_too_few_nodes_carry_together_are_refused(api_for, tenant_physics, two_nodes):
    Node.objects.filter(name="gpu-b").update(labels={"switch": "s2"})
    client = api_for("alice")
    message = _refused(_submit(client, constraints={"labels": {"switch": "s1"}}, nodes=2), "constraints")
    assert "2 node(s)" in message and "only 1" in message
    _refused(_submit(client, constraints={"same": "switch"}, nodes=2), "constraints")  # s1 and s2: one each
    assert _submit(client, constraints={"same": "switch"}, nodes=1).status_code == 201


def test_a_labelled_node_too_small_or_out_of_reach_does_not_count(api_for, tenant_physics, two_nodes,
                                                                   resource_group):
    client = api_for("alice")
    _refused(_submit(client, constraints={"labels": {"switch": "s1"}}, per_node={"gpu": 8, "memory": 1024}),
             "per_node")  # (no node has the memory at all)
    Node.objects.create(name="gpu-big", resource_group=resource_group, gpu=8, memory=1024, state="ready",
                        vcluster=VCluster.objects.create(resource_group=resource_group, name="big"),
                        labels={"switch": "s1", "tier": "big"})
    _refused(_submit(client, constraints={"labels": {"tier": "big"}}), "constraints")  # big does not lend
    VCluster.objects.filter(name="big").update(allow_lending=True, max_borrow_pct=1.0)
    assert _submit(client, constraints={"labels": {"tier": "big"}}).status_code == 201
    Allocation.objects.all().delete()
    _refused(_submit(client, constraints={"labels": {"tier": "big"}}, preemptible=False), "constraints")


# -- opting out of preemption needs an operator's leave ----------------------------------------

@pytest.mark.parametrize(("field", "value", "allowance"), [
    ("preemptible", False, "allow_non_preemptible"),
    ("exclusive", True, "allow_exclusive"),
    ("forced", True, "allow_forced"),
    ("backfill", True, "allow_backfill"),
])
def test_job_types_that_escape_preemption_need_the_tenants_allowance(api_for, client, operator, tenant_physics,
                                                                     two_nodes, field, value, allowance):
    alice = api_for("alice")
    message = _refused(_submit(alice, **{field: value}), field)
    assert "operator" in message

    client.force_login(operator)
    done = client.patch("/api/v1/quotas/physics/", {allowance: True, "reason": "a service contract"},
                        content_type="application/json")
    assert done.status_code == 200, done.content
    audit = PolicyChange.objects.get(action="edit")
    assert audit.before[allowance] is False and audit.after[allowance] is True

    alice = api_for("alice")
    response = _submit(alice, **{field: value})
    assert response.status_code == 201, response.content
    assert getattr(Allocation.objects.get(pk=response.json()["id"]), field) is value


# -- one default checkpoint everywhere ----------------------------------------------------------

def test_the_default_checkpoint_is_none_in_the_api_and_the_form(api_for, tenant_physics, two_nodes):
    response = _submit(api_for("alice"), checkpoint=...)
    assert response.status_code == 201 and response.json()["checkpoint"] == "none"
    form = SubmitForm(tenants=[tenant_physics.pk])
    assert form["checkpoint"].value() == "none"
    page = api_for("alice").get("/jobs/new/").content.decode()
    assert '<option value="none" selected>' in page


def test_a_session_type_that_sets_a_job_type_gives_it_to_its_work(api_for, tenant_physics, two_nodes,
                                                                  resource_group):
    from scheduling.models import SessionType

    SessionType.objects.create(resource_group=resource_group, name="service", non_preemptible=True)
    client = api_for("alice")
    response = _submit(client, session_type="service")
    assert response.status_code == 201, response.content
    assert Allocation.objects.get(pk=response.json()["id"]).preemptible is False
    assert _submit(client, session_type="service", preemptible=False).status_code == 201
    _submit(client, exclusive=True)
    assert Allocation.objects.filter(exclusive=True).count() == 0  # the type gives only what it sets
