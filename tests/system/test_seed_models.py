"""Each of the five preemption models in the running system, one test per model.

One real Daphne for the module (on PostgreSQL and Redis, as deployed), the real agent program
in ``--simulate`` mode connected to it for every node, two tenants submitting over REST, and the
real scheduler pass as the worker runs it (Celery eager in this process: the pass a submission
asks for runs at its commit; the pass an agent's report asks for is run by the test, as the
worker would, once the report is in the database). The victims leave as their agents report it
over the socket (a simulated checkpoint takes a second, a simulated process answers SIGTERM at
once). Each test asserts the victims, their events and states, the decision record and what each
tenant reads of it through the API.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.test import Client

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.models import (
    Allocation,
    Membership,
    PreemptionDecision,
    Quota,
    SessionType,
    TenantShare,
)
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import agent_factory, daphne, wait_for  # noqa: F401
from tests.scheduling.seed_e2e import (
    client_for,
    eager_passes,  # noqa: F401  (autouse)
    explain,
    nodes,
    one_control_plane,  # noqa: F401  (the module's one Daphne)
    states,
    submit,
    submitted,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SIM_RUN_S = "600"  # simulated work outlives every test
STARVATION_S = 30


def _agents(tmp_path, agent_factory, group, vc, count: int) -> list[Node]:  # noqa: F811
    """``count`` nodes, each with a simulated agent connected and greeted."""
    made = nodes(group, vc, count)
    for node in made:
        agent_factory(agent_token_issue(node=node), workdir=tmp_path / node.name,
                      args=("--simulate", "--sim-seconds", SIM_RUN_S, "--log-level", "WARNING"))
    for node in made:
        wait_for(lambda n=node: Node.objects.get(pk=n.pk).last_heartbeat_at, 60, f"{node.name}'s agent to say hello")
    return made


def _started_by_agent(*ids: int) -> None:
    """Each start reached its agent: the agent's report of it is in the history."""
    for ident in ids:
        wait_for(lambda i=ident: Allocation.objects.get(pk=i).events.filter(
            reason__contains="(simulated, no process)").exists(), 30, f"allocation {ident}'s agent to start it")


def _transitions(ident: int) -> list[tuple[str, str]]:
    """The allocation's state changes (the agents' reports of a start change nothing)."""
    return [(a, b) for a, b in states(ident) if a != b]


def _state(ident: int) -> str:
    return Allocation.objects.get(pk=ident).state


def _until(ident: int, state: str) -> Allocation:
    wait_for(lambda: _state(ident) == state, 30, f"allocation {ident} to be {state}")
    return Allocation.objects.get(pk=ident)


def _checkpointed_by_agent(victim: Allocation, tmp_path) -> None:
    """The checkpoint was the agent's: its location is under the node agent's directory."""
    assert victim.checkpoint_location.startswith(str(tmp_path)), victim.checkpoint_location
    assert victim.resume_from_checkpoint and victim.preempted_count == 1


def _preempting(group_id: int, preemptor: int) -> PreemptionDecision:
    return PreemptionDecision.objects.get(preemptor_id=preemptor, code="PREEMPT", resource_group_id=group_id)


def test_class_cost_lattice(tmp_path, agent_factory, resource_group, vcluster_hpc,  # noqa: F811
                            tenant_physics, tenant_chemistry):
    """Lattice: a class-7 job of chemistry preempts the cheapest lower-class work, physics' class 1
    job (a one-minute checkpoint against its own class 5 job's ten minutes), which checkpoints
    through its agent and is requeued to resume; the preemptor starts on the node it freed."""
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 2)
    alice, bob = client_for("alice"), client_for("bob")
    low = submitted(alice, per_node={"gpu": 8}, preemption_class=1, checkpoint_minutes=1)
    mid = submitted(bob, per_node={"gpu": 8}, preemption_class=5, checkpoint_minutes=10)
    assert (_state(low), _state(mid)) == ("running", "running")
    _started_by_agent(low, mid)

    high = submitted(bob, per_node={"gpu": 8}, preemption_class=7)
    decision = _preempting(resource_group.pk, high)
    assert decision.trigger == "priority" and decision.outcome == "executed"
    assert [(v["id"], v["action"], v["cost"]) for v in decision.victims] == [(str(low), "checkpoint", 1.0)]
    low_node = list(Allocation.objects.get(pk=low).placements.values_list("node__name", flat=True))
    assert decision.nodes == low_node

    victim = _until(low, "pending")  # the agent checkpointed it and the control plane requeued it
    _checkpointed_by_agent(victim, tmp_path)
    assert _transitions(low) == [("", "pending"), ("pending", "running"), ("running", "checkpointing"),
                           ("checkpointing", "suspended"), ("suspended", "pending")]
    schedule_pass(resource_group.pk)  # the pass the report asked for
    assert _state(high) == "running" and _state(mid) == "running"
    assert list(Allocation.objects.get(pk=high).placements.values_list("node__name", flat=True)) == low_node

    alice_view = explain(alice, low)["preemptions"]
    assert [p["id"] for p in alice_view] == [decision.pk]
    assert alice_view[0]["preemptor_description"] == "a class-7 allocation of another tenant"
    bob_view = bob.get(f"/api/v1/preemptions/{decision.pk}/").json()
    assert bob_view["preemptor"] == high and bob_view["victims"] == [
        {"id": None, "tenant": "another tenant", "reason": "priority", "action": "checkpoint"}]
    assert bob.get(f"/api/v1/allocations/{low}/").status_code == 404


def test_priority_backend_ai(tmp_path, agent_factory, resource_group, vcluster_hpc,  # noqa: F811
                             tenant_physics, tenant_chemistry):
    """Backend.AI: chemistry's sessions take the project's default priority 3; alice's priority-20
    session preempts the oldest of them, which its agent terminates; terminate mode ends it."""
    resource_group.policy = {"kind": "priority", "preemptible_priority": 5, "preemption_order": "oldest",
                             "mode": "terminate"}
    resource_group.save()
    Quota.objects.filter(tenant=tenant_chemistry).update(default_priority=3, priority_changeable=False)
    Membership.objects.filter(user__username="alice").update(max_priority=20)
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 1)
    alice, bob = client_for("alice"), client_for("bob")

    old = submitted(bob, per_node={"gpu": 4})
    new = submitted(bob, per_node={"gpu": 4})
    assert list(Allocation.objects.filter(pk__in=[old, new]).order_by("id").values_list("priority", "state")) == [
        (3, "running"), (3, "running")]
    _started_by_agent(old, new)
    assert submit(alice, per_node={"gpu": 4}, priority=30).status_code == 400  # above alice's own 20
    urgent = submitted(alice, per_node={"gpu": 4}, priority=20)

    decision = _preempting(resource_group.pk, urgent)
    assert decision.trigger == "priority"
    assert [(v["id"], v["action"]) for v in decision.victims] == [(str(old), "terminate")]
    assert {c["id"]: c["code"] for c in decision.candidates} == {str(old): "SELECTED", str(new): "NOT_NEEDED"}
    victim = _until(old, "preempted")  # the agent's SIGTERM and exit report
    assert victim.exit_code == -15
    assert _transitions(old) == [("", "pending"), ("pending", "running"), ("running", "terminating"),
                           ("terminating", "preempted")]
    schedule_pass(resource_group.pk)
    assert (_state(urgent), _state(new)) == ("running", "running")

    bob_view = explain(bob, old)
    assert bob_view["state"] == "preempted" and bob_view["preemptions"][0]["trigger"] == "priority"
    assert bob_view["preemptions"][0]["preemptor_description"] == "a class-0 allocation of another tenant"
    alice_view = alice.get(f"/api/v1/preemptions/{decision.pk}/").json()
    assert alice_view["code"] == "PREEMPT" and alice_view["victims"][0]["tenant"] == "another tenant"


def test_priority_backend_ai_a_stored_default_above_a_narrowed_range(tmp_path, agent_factory, resource_group,  # noqa: F811
                                                                     vcluster_hpc, tenant_physics, tenant_chemistry):
    """Backend.AI: bob's own default priority 50 was stored before chemistry's range narrowed to
    0..3; his sessions get 3, the nearest he may name, so they stay below the threshold 5 and
    alice's priority-10 session preempts one through its agent (with 50 it could not)."""
    resource_group.policy = {"kind": "priority", "preemptible_priority": 5, "preemption_order": "newest",
                             "mode": "terminate"}
    resource_group.save()
    Quota.objects.filter(tenant=tenant_chemistry).update(default_priority=2, min_priority=0, max_priority=3)
    Membership.objects.filter(user__username="bob").update(default_priority=50)  # no check when stored
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 1)
    alice, bob = client_for("alice"), client_for("bob")

    held = submitted(bob, per_node={"gpu": 8})
    assert bob.get(f"/api/v1/allocations/{held}/").json()["priority"] == 3
    _started_by_agent(held)
    urgent = submitted(alice, per_node={"gpu": 8}, priority=10)
    decision = _preempting(resource_group.pk, urgent)
    assert [(v["id"], v["action"]) for v in decision.victims] == [(str(held), "terminate")]
    victim = _until(held, "preempted")  # the agent's SIGTERM and exit report
    assert victim.exit_code == -15 and victim.priority == 3
    schedule_pass(resource_group.pk)
    assert _state(urgent) == "running"
    assert explain(bob, held)["preemptions"][0]["id"] == decision.pk


def test_fair_share_ytsaurus(tmp_path, agent_factory, resource_group, vcluster_hpc,  # noqa: F811
                             tenant_physics, tenant_chemistry, operator):
    """YTsaurus: physics fills the group (share 1.0 of a fair share of 0.5); chemistry, with no
    usage, submits; once the starvation timeout has passed it starts by preempting physics' newest
    work above its share, never a job within it (WITHIN_FAIR_SHARE)."""
    # A starvation timeout no run of the steps before it can outlast on a loaded machine; the test
    # moves chemistry's mark back past it rather than waiting for it.
    resource_group.policy = {"kind": "fair_share", "tolerance": 0.8, "starvation_timeout_s": STARVATION_S,
                             "aggressive_starvation_timeout_s": 60, "preemption_threshold": 1.0,
                             "aggressive_threshold": 1.0, "preemptive_scheduling_backoff_s": 30}
    resource_group.save()
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 4)
    alice, bob, op = client_for("alice"), client_for("bob"), client_for("op")
    jobs = [submitted(alice, per_node={"gpu": 8}, preemption_class=3) for _ in range(4)]
    _started_by_agent(*jobs)
    started = [Allocation.objects.get(pk=j).started_at for j in jobs]
    assert started == sorted(started) and len(set(started)) == 4

    chem = submitted(bob, per_node={"gpu": 8}, preemption_class=3)
    shares = {r["tenant"]: r for r in op.get(f"/api/v1/resource-groups/{resource_group.name}/shares/").json()["shares"]}
    assert shares["chemistry"]["share"] == 0 and shares["chemistry"]["status"] == "below_fair_share"
    assert shares["physics"]["share"] == pytest.approx(1.0) and shares["physics"]["status"] == "normal"
    assert PreemptionDecision.objects.filter(preemptor_id=chem).latest("id").code == "NOT_STARVING"

    # The starvation timeout passes: chemistry has been below its share for longer than that.
    TenantShare.objects.filter(resource_group=resource_group, tenant=tenant_chemistry).update(
        below_since=F("below_since") - timedelta(seconds=STARVATION_S + 1))
    schedule_pass(resource_group.pk)
    decision = _preempting(resource_group.pk, chem)
    assert decision.trigger == "fair_share"
    # running totals in start order: 0.25 and 0.5 are within physics' 0.5, 0.75 and 1.0 above it
    codes = {c["id"]: (c["verdict"], c["code"]) for c in decision.candidates}
    assert codes[str(jobs[0])] == codes[str(jobs[1])] == ("ineligible", "WITHIN_FAIR_SHARE")
    assert codes[str(jobs[2])][0] == "spared"
    assert [(v["id"], v["reason"]) for v in decision.victims] == [(str(jobs[3]), "fair_share")]  # newest start

    victim = _until(jobs[3], "pending")
    _checkpointed_by_agent(victim, tmp_path)
    schedule_pass(resource_group.pk)
    assert _state(chem) == "running"
    assert [_state(j) for j in jobs[:3]] == ["running"] * 3
    schedule_pass(resource_group.pk)  # one node of four: 0.25; nothing more pending, so not below
    row = TenantShare.objects.get(tenant=tenant_chemistry, resource_group=resource_group)
    assert row.share == pytest.approx(0.25) and row.below_since is None

    alice_view = explain(alice, jobs[3])["preemptions"]
    assert alice_view[0]["id"] == decision.pk and alice_view[0]["trigger"] == "fair_share"
    assert "chemistry" not in str(alice_view)
    assert explain(alice, jobs[0])["preemptions"] == []
    bob_view = bob.get(f"/api/v1/preemptions/{decision.pk}/").json()
    assert (bob_view["code"], bob_view["preemptor"]) == ("PREEMPT", chem)
    assert bob_view["victims"] == [{"id": None, "tenant": "another tenant", "reason": "fair_share",
                                    "action": "checkpoint"}]


def test_queue_lsf(tmp_path, agent_factory, resource_group, vcluster_hpc,  # noqa: F811
                   tenant_physics, tenant_chemistry):
    """LSF: an urgent (preemptive) queue's job preempts the low queue; with PREEMPT_FOR
    OPTIMAL_MINI_JOB it takes the node with one job rather than the one with two."""
    resource_group.policy = {"kind": "queue", "mode": "suspend", "preempt_for": "optimal_mini_job"}
    resource_group.save()
    SessionType.objects.create(resource_group=resource_group, name="urgent", priority=90, preemptive=True,
                               preemptable=False)
    SessionType.objects.create(resource_group=resource_group, name="low", priority=10, preemptable=True)
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 2)
    alice, bob = client_for("alice"), client_for("bob")
    a1 = submitted(bob, session_type="low", per_node={"gpu": 4})
    a2 = submitted(bob, session_type="low", per_node={"gpu": 4})
    b1 = submitted(bob, session_type="low", per_node={"gpu": 8})
    _started_by_agent(a1, a2, b1)
    pair = {n for j in (a1, a2) for n in Allocation.objects.get(pk=j).placements.values_list("node__name", flat=True)}
    alone = list(Allocation.objects.get(pk=b1).placements.values_list("node__name", flat=True))
    assert len(pair) == 1 and pair.isdisjoint(alone)

    urgent = submitted(alice, session_type="urgent", per_node={"gpu": 8})
    decision = _preempting(resource_group.pk, urgent)
    assert [(v["id"], v["action"]) for v in decision.victims] == [(str(b1), "checkpoint")]
    assert decision.nodes == alone
    assert {c["id"]: c["code"] for c in decision.candidates} == {
        str(a1): "NOT_NEEDED", str(a2): "NOT_NEEDED", str(b1): "SELECTED"}

    _checkpointed_by_agent(_until(b1, "pending"), tmp_path)
    schedule_pass(resource_group.pk)
    assert _state(urgent) == "running" and (_state(a1), _state(a2)) == ("running", "running")
    assert list(Allocation.objects.get(pk=urgent).placements.values_list("node__name", flat=True)) == alone

    bob_view = explain(bob, b1)["preemptions"]
    assert len(bob_view) == 1 and bob_view[0]["preemptor_description"] == "a class-0 allocation of another tenant"
    alice_view = alice.get(f"/api/v1/preemptions/{decision.pk}/").json()
    assert alice_view["victims"] == [{"id": None, "tenant": "another tenant", "reason": "priority",
                                      "action": "checkpoint"}]
    assert bob.get(f"/api/v1/allocations/{urgent}/explain/").status_code == 404


def test_rank_symphony(tmp_path, agent_factory, resource_group, vcluster_hpc,  # noqa: F811
                       tenant_physics, tenant_chemistry):
    """Symphony: alice's session asks rank 4 of its type's 1..9 and, scope "lower", takes the node
    of chemistry's rank-3 session, not of its rank-4 one; requeue mode puts the victim back."""
    resource_group.policy = {"kind": "rank", "mode": "requeue"}
    resource_group.save()
    SessionType.objects.create(resource_group=resource_group, name="svc", rank=5, rank_min=1, rank_max=9,
                               preemptive=True, scope="lower")
    SessionType.objects.create(resource_group=resource_group, name="batch", rank=3, rank_min=1, rank_max=4)
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 2)
    alice, bob = client_for("alice"), client_for("bob")
    raised = submitted(bob, session_type="batch", per_node={"gpu": 8}, rank=4)
    plain = submitted(bob, session_type="batch", per_node={"gpu": 8})
    _started_by_agent(raised, plain)

    high = submitted(alice, session_type="svc", per_node={"gpu": 8}, rank=4)
    decision = _preempting(resource_group.pk, high)
    assert [(v["id"], v["action"]) for v in decision.victims] == [(str(plain), "terminate")]
    assert {c["id"]: c["code"] for c in decision.candidates} == {str(raised): "RANK_NOT_LOWER",
                                                                 str(plain): "SELECTED"}
    victim = _until(plain, "pending")  # the agent's exit report; requeued to run again
    assert (victim.preempted_count, victim.exit_code) == (1, -15)
    assert _transitions(plain) == [("", "pending"), ("pending", "running"), ("running", "terminating"),
                             ("terminating", "pending")]
    schedule_pass(resource_group.pk)
    assert (_state(high), _state(raised)) == ("running", "running")

    bob_view = explain(bob, plain)["preemptions"]
    assert bob_view[0]["id"] == decision.pk and bob_view[0]["trigger"] == "fair_share"
    assert bob_view[0]["preemptor_description"] == "a class-0 allocation of another tenant"
    alice_view = alice.get(f"/api/v1/preemptions/{decision.pk}/").json()
    assert alice_view["code"] == "PREEMPT" and alice_view["victims"][0]["tenant"] == "another tenant"


def test_class_cost_multi_node_request_within_max_victims(tmp_path, agent_factory, resource_group, vcluster_hpc,  # noqa: F811
                                                          tenant_physics, tenant_chemistry, operator):
    """A class-7 request for two whole nodes, each held by one class-1 job: under max_victims 1 it
    waits and says so (no set of one victim can free two nodes); once an operator allows two
    victims, both are checkpointed through their agents and the request starts on both nodes."""
    _agents(tmp_path, agent_factory, resource_group, vcluster_hpc, 2)
    ops = Client()
    ops.force_login(operator)

    def allow(victims: int) -> None:
        policy = {"kind": "class_cost", "mode": "suspend", "max_victims": victims}
        changed = ops.put("/api/v1/resource-groups/rg-main/policy/", {"policy": policy, "reason": "test"},
                          content_type="application/json")
        assert changed.status_code == 200, changed.content

    allow(1)
    alice, bob = client_for("alice"), client_for("bob")
    lows = [submitted(alice, per_node={"gpu": 8}, preemption_class=1, checkpoint_minutes=1) for _ in range(2)]
    assert [_state(i) for i in lows] == ["running", "running"]
    _started_by_agent(*lows)

    wide = submitted(bob, nodes=2, per_node={"gpu": 8}, preemption_class=7)
    schedule_pass(resource_group.pk)
    assert _state(wide) == "pending" and [_state(i) for i in lows] == ["running", "running"]
    reason = bob.get(f"/api/v1/allocations/{wide}/explain/").json()["reason"]
    assert reason["code"] == "RESOURCES" and reason["preemption"]["code"] == "EXCEEDS_MAX_VICTIMS", reason
    assert "(1)" in reason["preemption"]["explanation"]  # the bound that binds
    assert not PreemptionDecision.objects.filter(preemptor_id=wide, code="PREEMPT").exists()

    allow(2)
    schedule_pass(resource_group.pk)
    decision = _preempting(resource_group.pk, wide)
    assert sorted(int(v["id"]) for v in decision.victims) == sorted(lows)
    for low in lows:
        _checkpointed_by_agent(_until(low, "pending"), tmp_path)
    schedule_pass(resource_group.pk)  # the pass the reports asked for
    assert _state(wide) == "running"
    assert sorted(Allocation.objects.get(pk=wide).placements.values_list("node__name", flat=True)) == [
        "gpu-a", "gpu-b"]
