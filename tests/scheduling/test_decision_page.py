"""The console's decision page reads as a record: outcome once in the title, candidates in id
order with tenant, class, size, nodes, runtime and cost rounded."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import PreemptionDecision

pytestmark = pytest.mark.django_db


def _rows(html: str, table: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [[" ".join(re.sub(r"<[^>]+>", "", cell).split()) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def test_candidates_by_id_with_their_facts_and_the_outcome_once(client, operator, resource_group, make_allocation,
                                                                tenant_chemistry):
    at = timezone.now()
    bob = tenant_chemistry.memberships.first().user
    # Ids whose text order differs from their number order ("100000001" < "99999990").
    nine = make_allocation(id=99_999_990, state="running", node_count=1, per_node_gpu=8, preemption_class=2, ran_on=["gpu-b"],
                           started_at=at - timedelta(hours=1, minutes=5))
    hundred = make_allocation(id=100_000_001, state="running", node_count=2, per_node_gpu=4, preemption_class=1, tenant=tenant_chemistry,
                              user=bob, ran_on=["gpu-a", "gpu-c"], started_at=at - timedelta(minutes=7))
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=8)
    small, big = nine.pk, hundred.pk
    d = PreemptionDecision.objects.create(
        resource_group=resource_group, preemptor=high, decided_for=at, result="preempt", code="PREEMPT",
        explanation="x", outcome="executed", policy_snapshot={"kind": "class_cost"},
        victims=[{"id": str(nine.pk), "reason": "priority", "action": "checkpoint", "cost": 1.23456}],
        candidates=[{"id": str(big), "verdict": "eligible", "code": "OK", "cost": 7.777777},
                    {"id": str(small), "verdict": "selected", "code": "SELECTED", "cost": 1.23456},
                    {"summary": {"LOWER_CLASS": 3}}])
    client.force_login(operator)
    html = client.get(f"/ops/decisions/{d.pk}/").content.decode()
    assert re.search(r"<h1>(.*?)</h1>", html).group(1) == f"Decision {d.pk}: #{high.pk} preempts 1 job"
    rows = _rows(html, "candidates")
    facts = {nine.pk: ["physics", "2", "1 × 8 GPU", "gpu-b", "1h 05m"],
             hundred.pk: ["chemistry", "1", "2 × 4 GPU", "gpu-a, gpu-c", "7m"]}
    cost = {nine.pk: "1.23", hundred.pk: "7.78"}
    assert [r[0] for r in rows[:2]] == [f"#{small}", f"#{big}"]
    for row, pk in zip(rows, (small, big), strict=False):
        assert row[1:6] == facts[pk] and row[8] == cost[pk]
    assert "LOWER_CLASS" in rows[2][0]
    assert _rows(html, "victims") == [[f"#{nine.pk}", *facts[nine.pk], "priority", "checkpoint", "1.23"]]


def test_a_victim_started_again_since_shows_its_runtime_at_the_decision_not_its_new_nodes(
        client, operator, resource_group, make_allocation):
    """Preempted at the decision, requeued and started again elsewhere later: the page reads the
    runtime it had at the decision from its history, and does not put it on its new nodes."""
    from scheduling.models import AllocationEvent

    at = timezone.now() - timedelta(minutes=30)
    victim = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=2,
                             ran_on=["gpu-later"], started_at=at + timedelta(minutes=10))
    steady = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=1,
                             ran_on=["gpu-steady"], started_at=at - timedelta(minutes=3))
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=8)
    # The agent's report of where the run started is a running-to-running event, not a start.
    history = [(victim, "", "pending", at - timedelta(minutes=50)),
               (victim, "pending", "running", at - timedelta(minutes=42)),
               (victim, "running", "running", at - timedelta(minutes=1)),
               (victim, "running", "preempting", at + timedelta(seconds=1)),
               (victim, "preempting", "pending", at + timedelta(minutes=2)),
               (victim, "pending", "running", at + timedelta(minutes=10)),
               (steady, "pending", "running", at - timedelta(minutes=3))]
    for alloc, before, state, when in history:
        event = AllocationEvent.objects.create(allocation=alloc, from_state=before, to_state=state, reason=state)
        AllocationEvent.objects.filter(pk=event.pk).update(created_at=when)
    d = PreemptionDecision.objects.create(
        resource_group=resource_group, preemptor=high, decided_for=at, result="preempt", code="PREEMPT",
        explanation="x", outcome="executed", policy_snapshot={"kind": "class_cost"},
        victims=[{"id": str(victim.pk), "reason": "priority", "action": "checkpoint"}],
        candidates=[{"id": str(victim.pk), "verdict": "selected", "code": "SELECTED"},
                    {"id": str(steady.pk), "verdict": "eligible", "code": "OK"}])
    client.force_login(operator)
    html = client.get(f"/ops/decisions/{d.pk}/").content.decode()
    by_id = {row[0]: row for row in _rows(html, "candidates")}
    assert by_id[f"#{victim.pk}"][4:6] == ["-", "42m"]  # nodes unknown here now; 42 minutes into its run
    assert by_id[f"#{steady.pk}"][4:6] == ["gpu-steady", "3m"]
    assert _rows(html, "victims")[0][4:6] == ["-", "42m"]
