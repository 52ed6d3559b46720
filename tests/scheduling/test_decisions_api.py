"""Decision records through the API: who reads which, redaction, lists without candidates, cursors."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.models import Allocation, DecisionAudience, PreemptionDecision
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


@pytest.fixture
def cross_tenant_preemption(resource_group, vcluster_hpc, node_gpu_a, tenant_physics, tenant_chemistry):
    """alice's (physics) class-2 job runs on the only node; bob's (chemistry) class-7 job preempts it."""
    def job(tenant, klass):
        return Allocation.objects.create(
            resource_group=resource_group, vcluster=vcluster_hpc, tenant=tenant,
            user=tenant.memberships.first().user, submitted_at=timezone.now(), state="pending",
            node_count=1, per_node_gpu=8, preemption_class=klass, checkpoint="auto")

    low = job(tenant_physics, 2)
    schedule_pass(resource_group.pk)
    high = job(tenant_chemistry, 7)
    schedule_pass(resource_group.pk)
    return low, high, PreemptionDecision.objects.get(preemptor=high, result="preempt")


def test_the_preemptors_and_the_victims_tenants_are_the_audience(cross_tenant_preemption, tenant_physics,
                                                                  tenant_chemistry):
    _, _, decision = cross_tenant_preemption
    readers = set(DecisionAudience.objects.filter(decision=decision).values_list("tenant_id", flat=True))
    assert readers == {tenant_physics.pk, tenant_chemistry.pk}


def test_victims_tenant_reads_it_redacted_and_a_stranger_not_at_all(cross_tenant_preemption, api_for,
                                                                     django_user_model, tenant_physics):
    from scheduling.models import Membership, Quota, Tenant

    low, high, decision = cross_tenant_preemption
    alice = api_for("alice")
    listed = alice.get("/api/v1/preemptions/").json()["results"]
    assert [d["id"] for d in listed] == [decision.pk]
    assert listed[0]["preemptor_description"] == "a class-7 allocation of another tenant"
    assert "candidates" not in listed[0] and "policy" not in listed[0]
    detail = alice.get(f"/api/v1/preemptions/{decision.pk}/").json()
    assert detail["victims"][0]["id"] == low.pk
    # The same types as the operator reads (an id hidden is null, never a sentence in its place).
    assert listed[0]["preemptor"] is None and detail["preemptor"] is None
    assert str(high.pk) not in {c.get("id") for c in detail["candidates"]}

    stranger = Tenant.objects.create(name="biology")
    Quota.objects.create(tenant=stranger, max_nodes=1, max_gpus=8, max_concurrent_allocations=1, fair_share=0.1)
    carol = django_user_model.objects.create_user("carol", password="pw-carol-123")
    Membership.objects.create(user=carol, tenant=stranger)
    client = api_for("carol")
    assert client.get("/api/v1/preemptions/").json()["results"] == []
    assert client.get(f"/api/v1/preemptions/{decision.pk}/").status_code == 404


def test_member_of_two_tenants_sees_each_decision_once(cross_tenant_preemption, api_for, django_user_model,
                                                      tenant_physics, tenant_chemistry):
    from scheduling.models import Membership

    _, _, decision = cross_tenant_preemption
    both = django_user_model.objects.create_user("dana", password="pw-dana-123")
    Membership.objects.create(user=both, tenant=tenant_physics)
    Membership.objects.create(user=both, tenant=tenant_chemistry)
    ids = [d["id"] for d in api_for("dana").get("/api/v1/preemptions/").json()["results"]]
    assert ids.count(decision.pk) == 1


def test_decision_list_walks_pages_by_cursor_in_fixed_queries(resource_group, tenant_physics, api_for,
                                                              django_assert_max_num_queries):
    now = timezone.now()
    records = PreemptionDecision.objects.bulk_create([
        PreemptionDecision(resource_group=resource_group, decided_for=now, result="wait", code="NO_CAPACITY",
                           explanation=f"record {i}", candidates=[{"id": str(i)}] * 50) for i in range(120)])
    DecisionAudience.objects.bulk_create([DecisionAudience(tenant=tenant_physics, decision=r) for r in records])
    client = api_for("alice")
    seen: list[int] = []
    url = "/api/v1/preemptions/"
    while url:
        with django_assert_max_num_queries(6):
            body = client.get(url).json()
        seen += [d["id"] for d in body["results"]]
        url = body["next"]
    assert seen == sorted((r.pk for r in records), reverse=True)


@pytest.mark.parametrize("members_of", [1, 2])
def test_a_tenant_s_deep_pages_start_at_their_cursor_in_the_audience_index(
        members_of, resource_group, tenant_physics, tenant_chemistry, api_for, django_user_model):
    """Forward and back, every page the cursor gives is the one the plain list has there, and the
    page's bound is on the audience's decision column, so the (tenant, decision) index is read
    from the cursor on (a bound on the decision's id alone is not carried across the join)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.models import Membership

    now = timezone.now()
    records = PreemptionDecision.objects.bulk_create([
        PreemptionDecision(resource_group=resource_group, decided_for=now, result="wait", code="NO_CAPACITY",
                           explanation=f"record {i}") for i in range(400)])
    # physics reads every third record, chemistry every other (some both): each tenant's ids have gaps.
    DecisionAudience.objects.bulk_create(
        [DecisionAudience(tenant=tenant_physics, decision=r) for r in records[::3]]
        + [DecisionAudience(tenant=tenant_chemistry, decision=r) for r in records[::2]])
    reader = django_user_model.objects.create_user("erin", password="pw-erin-123")
    tenants = [tenant_physics, tenant_chemistry][:members_of]
    for tenant in tenants:
        Membership.objects.create(user=reader, tenant=tenant)
    visible = sorted({a.decision_id for a in DecisionAudience.objects.filter(tenant__in=tenants)}, reverse=True)
    client = api_for("erin")
    pages, url = [], "/api/v1/preemptions/"
    while url:
        with CaptureQueriesContext(connection) as queries:
            body = client.get(url).json()
        pages.append([d["id"] for d in body["results"]])
        if len(pages) > 1:  # behind a cursor: the bound is on the audience's column
            listing = next(q["sql"] for q in queries if "scheduling_preemptiondecision" in q["sql"]
                           and "ORDER BY" in q["sql"])
            assert '"decision_id" <=' in listing, listing  # (only the audience has that column)
        url = body["next"]
    assert [i for page in pages for i in page] == visible and len(pages) >= 2
    back = client.get(body["previous"]).json()  # from the last page, one back
    assert [d["id"] for d in back["results"]] == pages[-2]


def test_allocation_history_is_paged_oldest_first(api_for, make_allocation):
    from scheduling.models import AllocationEvent

    alloc = make_allocation(state="pending", node_count=1, per_node_gpu=8)
    AllocationEvent.objects.bulk_create([AllocationEvent(allocation=alloc, from_state="pending",
                                                         to_state="pending", reason=f"step {i}")
                                         for i in range(150)])
    client = api_for("alice")
    first = client.get(f"/api/v1/allocations/{alloc.pk}/events/").json()
    second = client.get(first["next"]).json()
    reasons = [e["reason"] for e in first["results"] + second["results"]]
    assert reasons[-150:] == [f"step {i}" for i in range(150)]
    assert second["next"] is None


def test_explain_reads_every_preemption_redacted_in_a_fixed_number_of_queries(cross_tenant_preemption, api_for):
    """An allocation preempted many times: its explanation costs the same queries as one preemption's,
    and each record is redacted for the victim's tenant."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    low, high, first = cross_tenant_preemption
    client = api_for("alice")

    def explain() -> tuple[dict, int]:
        with CaptureQueriesContext(connection) as queries:
            body = client.get(f"/api/v1/allocations/{low.pk}/explain/").json()
        return body, len(queries)

    once, cost_once = explain()
    for _ in range(5):  # the same victim chosen again by later decisions
        record = PreemptionDecision.objects.create(
            resource_group=first.resource_group, preemptor=high, decided_for=timezone.now(), result="preempt",
            code=first.code, nodes=first.nodes, victims=first.victims, candidates=first.candidates,
            explanation=first.explanation)
        record.victim_allocations.add(low)
    many, cost_many = explain()
    assert len(once["preemptions"]) == 1 and len(many["preemptions"]) == 6
    assert cost_many == cost_once
    for shown in many["preemptions"]:
        assert shown["preemptor_description"] == "a class-7 allocation of another tenant"
        assert shown["victims"][0]["id"] == low.pk
        assert {c["id"] for c in shown["candidates"]} <= {str(low.pk)}
        assert "policy" not in shown


@pytest.fixture
def decision_with_a_hold(make_allocation, tenant_physics, tenant_chemistry, resource_group):
    """alice's pending request waits; its decision's candidates include a hold (nodes reserved for
    another waiting preemptor, ``hold:N``), one of alice's allocations and one of chemistry's."""
    waiting = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=3)
    mine = make_allocation(state="running", node_count=1, per_node_gpu=8)
    theirs = Allocation.objects.create(resource_group=resource_group, tenant=tenant_chemistry,
                                       user=tenant_chemistry.memberships.first().user,
                                       submitted_at=timezone.now(), state="pending", node_count=1)
    record = PreemptionDecision.objects.create(
        resource_group=resource_group, preemptor=waiting, decided_for=timezone.now(), result="wait",
        code="NO_VICTIMS", nodes=[], victims=[], explanation="waits",
        candidates=[{"id": f"hold:{theirs.pk}", "verdict": "excluded", "code": "NOT_PREEMPTIBLE"},
                    {"id": str(mine.pk), "verdict": "excluded", "code": "CLASS_TOO_HIGH"},
                    {"id": f"hold:{waiting.pk}", "verdict": "excluded", "code": "NOT_PREEMPTIBLE"}])
    DecisionAudience.objects.create(tenant=tenant_physics, decision=record)
    return waiting, mine, theirs, record


def test_a_hold_among_the_candidates_is_shown_as_a_hold_and_never_crashes(decision_with_a_hold, api_for,
                                                                          operator):
    waiting, mine, theirs, record = decision_with_a_hold
    alice = api_for("alice")
    detail = alice.get(f"/api/v1/preemptions/{record.pk}/")
    assert detail.status_code == 200
    # Its own work and the hold kept for its own request are named; another tenant's hold is counted.
    assert {c["id"] for c in detail.json()["candidates"]} == {str(mine.pk), f"hold:{waiting.pk}"}
    assert detail.json()["other_candidates"] == 1
    explained = alice.get(f"/api/v1/allocations/{waiting.pk}/explain/")
    assert explained.status_code == 200
    assert explained.json()["waiting"]["id"] == record.pk
    assert f"hold:{theirs.pk}" not in explained.content.decode()
    page = alice.get(f"/jobs/{waiting.pk}/")
    assert page.status_code == 200

    ops = api_for("op").get(f"/api/v1/preemptions/{record.pk}/").json()
    assert [c["id"] for c in ops["candidates"]] == [f"hold:{theirs.pk}", str(mine.pk), f"hold:{waiting.pk}"]


def test_the_operator_reads_the_same_types_with_the_ids(cross_tenant_preemption, client, operator):
    low, high, decision = cross_tenant_preemption
    client.force_login(operator)
    detail = client.get(f"/api/v1/preemptions/{decision.pk}/").json()
    listed = client.get("/api/v1/preemptions/").json()["results"][0]
    for shown in (detail, listed):
        assert (shown["preemptor"], shown["preemptor_description"]) == (high.pk, None)
        assert [v["id"] for v in shown["victims"]] == [low.pk]
