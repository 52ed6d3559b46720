"""The submission path's statements written out once (scheduling/admission_sql.py, models/rows.py)
and its cheaper input fields (api/input_fields.py) answer as the ORM queries and DRF fields they
replace: each is compared here with the ORM's or DRF's own answer on the same data."""

from __future__ import annotations

import pytest
from django.db.models import Count, Exists, F, Max, OuterRef, Q, Sum
from django.db.models.signals import post_save, pre_save
from django.forms.models import model_to_dict
from django.utils import timezone
from rest_framework import serializers

from nodes.models import Node
from scheduling import admission_sql
from scheduling.actions.quotas import ACTIVE, tenant_usage
from scheduling.api.serializers import AllocationInput
from scheduling.models import (
    Allocation,
    AllocationEvent,
    ApiToken,
    Membership,
    Quota,
    ResourceGroup,
    Tenant,
    VCluster,
)
from scheduling.models.allocations import RESOURCES

pytestmark = pytest.mark.django_db


def _columns(obj):
    """Every column's value as an instance holds it."""
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


@pytest.fixture
def second_membership(tenant_physics, tenant_chemistry, django_user_model):
    """alice in chemistry too, with her own priority policy; chemistry's quota removed."""
    alice = django_user_model.objects.get(username="alice")
    Quota.objects.filter(tenant=tenant_chemistry).delete()
    Membership.objects.create(user=alice, tenant=tenant_chemistry, default_priority=20, min_priority=5)
    return alice


@pytest.mark.parametrize("name", [None, "physics", "chemistry", "biology"])
def test_memberships_are_the_orm_s_with_tenant_and_quota(second_membership, name):
    orm = Membership.objects.filter(user=second_membership).select_related("tenant", "tenant__quota")
    if name:
        orm = orm.filter(tenant__name=name)
    want = {m.pk: m for m in orm}
    got = {m.pk: m for m in admission_sql.memberships(second_membership.pk, name)}
    assert sorted(got) == sorted(want) and len(got) == (2 if name is None else 0 if name == "biology" else 1)
    for pk, membership in got.items():
        assert _columns(membership) == _columns(want[pk])
        assert _columns(membership.tenant) == _columns(want[pk].tenant)
        expected_quota = getattr(want[pk].tenant, "quota", None)
        quota = getattr(membership.tenant, "quota", None)
        assert (quota is None) == (expected_quota is None)
        if quota is not None:
            assert _columns(quota) == _columns(expected_quota)
    with pytest.raises(Tenant.quota.RelatedObjectDoesNotExist):  # as select_related leaves a missing one
        next(m for m in admission_sql.memberships(second_membership.pk, "chemistry")).tenant.quota  # noqa: B018


@pytest.mark.parametrize("name", [None, "physics", "chemistry", "biology"])
def test_memberships_read_with_the_api_token_are_the_query_s(second_membership, name):
    from scheduling.actions.tokens import api_token_issue

    user, _, tenants = ApiToken.user_for(api_token_issue(user=second_membership))
    got = admission_sql.memberships_of_rows(user._lattice_membership_rows, name)
    want = admission_sql.memberships(second_membership.pk, name)
    assert sorted(m.pk for m in got) == sorted(m.pk for m in want)
    assert sorted(tenants) == sorted(Membership.objects.filter(user=second_membership).values_list("tenant_id",
                                                                                                     flat=True))
    for membership in got:
        expected = next(m for m in want if m.pk == membership.pk)
        assert _columns(membership) == _columns(expected)
        assert _columns(membership.tenant) == _columns(expected.tenant)
        quota, expected_quota = (getattr(m.tenant, "quota", None) for m in (membership, expected))
        assert (quota is None) == (expected_quota is None)
        if quota is not None:
            assert _columns(quota) == _columns(expected_quota) and quota.tenant is membership.tenant


def test_a_submission_with_an_api_token_and_a_vcluster_runs_five_statements(client, resource_group, vcluster_hpc,
                                                                            tenant_physics, two_nodes):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.actions.tokens import api_token_issue

    token = api_token_issue(user=tenant_physics.memberships.first().user)
    body = {"resource_group": resource_group.name, "vcluster": vcluster_hpc.name, "per_node": {"gpu": 1},
            "command": ["true"]}
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/allocations/", body, content_type="application/json",
                               HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 201, response.json()
    reads = [q["sql"] for q in queries.captured_queries if Membership._meta.db_table in q["sql"]]
    assert len(reads) == 1 and "scheduling_apitoken" in reads[0], reads
    # the token (with the memberships), the group, the vCluster with the nodes, the quota locked,
    # and the insert with the usage (BEGIN and COMMIT are not captured; under a test's transaction
    # the submission's is a savepoint)
    ours = [q["sql"][:40] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(ours) == (5 if connection.vendor == "postgresql" else 7), ours


@pytest.mark.parametrize("case", ["open", "admitted", "not admitted", "missing"])
def test_the_vcluster_and_its_admission_are_the_orm_s(resource_group, vcluster_hpc, tenant_physics,
                                                       tenant_chemistry, case):
    if case in ("admitted", "not admitted"):
        vcluster_hpc.tenants.add(tenant_physics if case == "admitted" else tenant_chemistry)
    name = "nope" if case == "missing" else "hpc"
    members = VCluster.tenants.through.objects.filter(vcluster=OuterRef("pk"))
    want = VCluster.objects.filter(resource_group=resource_group, name=name).annotate(
        restricted=Exists(members), admitted=Exists(members.filter(tenant=tenant_physics))).first()
    got, _ = admission_sql.vcluster_and_nodes(resource_group.pk, name, tenant_physics.pk,
                                              {"gpu": 1, "cpu": 0, "memory": 0})
    if want is None:
        assert got is None
        return
    assert _columns(got) == _columns(want)
    assert (got.restricted, got.admitted) == (want.restricted, want.admitted)
    assert (got.restricted, got.admitted) == {"open": (False, False), "admitted": (True, True),
                                              "not admitted": (True, False)}[case]


@pytest.mark.parametrize("need", [{"gpu": 1, "cpu": 0, "memory": 0}, {"gpu": 8, "cpu": 32, "memory": 0},
                                  {"gpu": 0, "cpu": 0, "memory": 600}])
def test_the_node_summary_is_the_orm_s_aggregate(resource_group, vcluster_hpc, need):
    lender = VCluster.objects.create(resource_group=resource_group, name="lender", max_borrow_pct=0.5)
    closed = VCluster.objects.create(resource_group=resource_group, name="closed", allow_lending=False)
    other = ResourceGroup.objects.create(name="other", policy={"kind": "class_cost"})
    for i, (vc, gpu, cpu, memory) in enumerate([(vcluster_hpc, 8, 64, 512), (vcluster_hpc, 4, 16, 128),
                                                (lender, 8, 32, 1024), (closed, 2, 8, 64), (None, 8, 128, 700)]):
        Node.objects.create(name=f"n{i}", resource_group=resource_group, vcluster=vc, gpu=gpu, cpu=cpu, memory=memory)
    Node.objects.create(name="elsewhere", resource_group=other, gpu=99, cpu=999, memory=9999)
    want = {row["vcluster_id"]: row for row in Node.objects.filter(resource_group=resource_group).order_by()
            .values("vcluster_id").annotate(nodes=Count("id"),
                                            holding=Count("id", filter=Q(**{f"{r}__gte": need[r] for r in RESOURCES})),
                                            **{f"most_{r}": Max(r) for r in RESOURCES})}
    got = {row["vcluster_id"]: row for row in admission_sql.node_summary(resource_group.pk, need)}
    assert sorted(got, key=str) == sorted(want, key=str)
    for home, row in got.items():
        vc = VCluster.objects.filter(pk=home).first()
        assert row == {**want[home], "allow_lending": vc.allow_lending if vc else None,
                       "max_borrow_pct": vc.max_borrow_pct if vc else None}


def test_the_locked_quota_is_the_tenant_s_and_none_without_one(tenant_physics, tenant_chemistry):
    Quota.objects.filter(tenant=tenant_chemistry).delete()
    assert _columns(admission_sql.quota_locked(tenant_physics.pk)) == _columns(tenant_physics.quota)
    assert admission_sql.quota_locked(tenant_chemistry.pk) is None


@pytest.mark.parametrize("states", [None, ["running"], ["pending", "held_nowhere"]])
def test_usage_is_the_orm_s_aggregate(make_allocation, tenant_physics, tenant_chemistry, states):
    for state, nodes, gpu in [("pending", 2, 4), ("running", 1, 8), ("completed", 3, 8), ("running", 4, 0)]:
        make_allocation(state=state, node_count=nodes, per_node_gpu=gpu)
    row = Allocation.objects.filter(tenant=tenant_physics, state__in=states or ACTIVE).aggregate(
        n=Count("id"), nodes=Sum("node_count"), gpus=Sum(F("node_count") * F("per_node_gpu")))
    usage = tenant_usage(tenant_physics, states)
    assert (usage.allocations, usage.nodes, usage.gpus) == (row["n"], row["nodes"] or 0, row["gpus"] or 0)
    assert tenant_usage(tenant_chemistry, states) == type(usage)(0, 0, 0)


def test_an_inserted_allocation_and_event_store_what_save_would(resource_group, vcluster_hpc, tenant_physics):
    user = tenant_physics.memberships.first().user
    fields = {"resource_group": resource_group, "tenant": tenant_physics, "user": user, "vcluster": vcluster_hpc,
              "submitted_at": timezone.now(), "node_count": 2, "per_node_gpu": 4, "command": ["run", "é"],
              "env": {"A": "1"}, "constraints": {"labels": {"switch": "s1"}}, "depends_on": [{"type": "afterok",
                                                                                               "job": 1}],
              "walltime_minutes": 30.5, "value": None, "held": True, "held_by": "user"}
    saved = Allocation.objects.create(**fields)
    inserted = admission_sql.insert(Allocation(**fields))
    assert inserted.pk is not None and inserted.pk != saved.pk and not inserted._state.adding
    a, b = (_columns(Allocation.objects.get(pk=pk)) for pk in (saved.pk, inserted.pk))
    assert {k: v for k, v in a.items() if k != "id"} == {k: v for k, v in b.items() if k != "id"}
    event = admission_sql.insert(AllocationEvent(allocation=inserted, from_state="", to_state="pending",
                                                 reason="submitted", actor=user))
    stored = AllocationEvent.objects.get(pk=event.pk)
    assert model_to_dict(stored) == model_to_dict(event) and stored.created_at is not None


def test_no_signal_watches_the_rows_inserted_without_save():
    """``insert`` sends no pre_save or post_save: it is only for models nothing listens to."""
    for model in (Allocation, AllocationEvent):
        assert not pre_save.has_listeners(model) and not post_save.has_listeners(model), model


@pytest.mark.parametrize("name", ["rg-main", "nope", "", 12, True, ["rg-main"], {"a": 1}, "RG-MAIN"])
def test_a_group_by_name_is_what_the_orm_finds(resource_group, name):
    try:
        want = ResourceGroup.objects.get(name=name)
    except ResourceGroup.DoesNotExist:
        want = None
    got = admission_sql.group_named(name)
    assert (got is None) == (want is None)
    if got is not None:
        assert _columns(got) == _columns(want)


class GenericInput(AllocationInput):
    """The same serializer with DRF's own field construction."""

    def get_fields(self):
        return serializers.Serializer.get_fields(self)


def test_the_flat_field_copies_are_drf_s_fields_and_each_serializer_s_own():
    ours, generic = AllocationInput().fields, GenericInput().fields
    assert list(ours) == list(generic)
    for name in ours:
        assert type(ours[name]) is type(generic[name]) and repr(ours[name]) == repr(generic[name]), name
        assert ours[name].parent is not None and ours[name].field_name == name
    again = AllocationInput().fields
    assert all(again[name] is not ours[name] and again[name].parent is not ours[name].parent for name in ours)
    with_child = [name for name in ours if hasattr(ours[name], "child")]
    assert {"command", "env", "per_node", "depends_on"} <= set(with_child)
    for name in with_child:  # each list or dict its own child, bound to it as DRF binds it
        assert ours[name].child is not again[name].child and ours[name].child.parent is ours[name], name
        assert (ours[name].child.field_name, ours[name].child.source) == ("", ""), name


@pytest.mark.parametrize("body", [
    {"per_node": {"gpu": -1}, "nodes": 0, "checkpoint": "sometimes", "name": "x" * 200, "command": "ls"},
    {"per_node": "8", "priority": 101, "walltime_minutes": 0, "held": "maybe", "depends_on": [{"type": "x"}]},
    {"per_node": {"gpu": 1}, "command": ["a\x00b"], "env": {"K": 1.5}, "constraints": {"labels": {"a": [1]}},
     "resource_group": "nope", "array": "9-1"},
    {"per_node": {"gpu": 1}, "command": [], "resource_group": 7, "extra": 1},
])
def test_field_errors_are_drf_s(resource_group, body):
    ours, generic = AllocationInput(data=body), GenericInput(data=body)
    assert not ours.is_valid() and not generic.is_valid()
    assert ours.errors == generic.errors


def test_an_allocation_and_its_first_event_inserted_together_store_what_save_would(resource_group, tenant_physics):
    user = tenant_physics.memberships.first().user
    fields = {"resource_group": resource_group, "tenant": tenant_physics, "user": user, "submitted_at": timezone.now(),
              "per_node_gpu": 2, "command": ["true"], "env": {"K": "v"}, "name": "both"}
    saved = Allocation.objects.create(**fields)
    saved_event = AllocationEvent.objects.create(allocation=saved, from_state="", to_state="pending",
                                                 reason="submitted", actor=user)
    alloc, event = Allocation(**fields), AllocationEvent(from_state="", to_state="pending", reason="submitted",
                                                         actor=user)
    admission_sql.insert_submitted(alloc, event, ACTIVE)
    assert alloc.pk not in (None, saved.pk) and event.allocation_id == alloc.pk and event.pk != saved_event.pk
    a, b = (_columns(Allocation.objects.get(pk=pk)) for pk in (saved.pk, alloc.pk))
    assert {k: v for k, v in a.items() if k != "id"} == {k: v for k, v in b.items() if k != "id"}
    stored = AllocationEvent.objects.get(pk=event.pk)
    assert model_to_dict(stored) == model_to_dict(event)
    assert {k: v for k, v in model_to_dict(stored).items() if k not in ("id", "allocation")} == \
        {k: v for k, v in model_to_dict(saved_event).items() if k not in ("id", "allocation")}
    assert not alloc._state.adding and not event._state.adding


@pytest.mark.parametrize("states", [ACTIVE, ["running"]])
def test_the_insert_returns_the_tenant_s_usage_before_its_row(make_allocation, resource_group, tenant_physics,
                                                              tenant_chemistry, states):
    for tenant, state, nodes, gpu in [(tenant_physics, "pending", 2, 4), (tenant_physics, "running", 1, 8),
                                      (tenant_physics, "completed", 3, 8), (tenant_chemistry, "running", 4, 2)]:
        make_allocation(tenant=tenant, state=state, node_count=nodes, per_node_gpu=gpu)
    usage = tenant_usage(tenant_physics, states)
    user = tenant_physics.memberships.first().user
    alloc = Allocation(resource_group=resource_group, tenant=tenant_physics, user=user, submitted_at=timezone.now(),
                       state="running", node_count=5, per_node_gpu=3, command=["true"])
    before = admission_sql.insert_submitted(alloc, AllocationEvent(from_state="", to_state="pending", actor=user),
                                            states)
    assert before == (usage.allocations, usage.nodes, usage.gpus) != (0, 0, 0)  # this row not counted
    after = tenant_usage(tenant_physics, states)
    assert (after.allocations, after.nodes, after.gpus) == (before[0] + 1, before[1] + 5, before[2] + 15)


@pytest.mark.parametrize("case", ["open", "not admitted", "missing", "no nodes", "missing, no nodes"])
def test_the_vcluster_and_nodes_read_together_are_each_read_alone(resource_group, vcluster_hpc, tenant_physics,
                                                                   tenant_chemistry, case):
    if case == "not admitted":
        vcluster_hpc.tenants.add(tenant_chemistry)
    if "no nodes" not in case:
        lender = VCluster.objects.create(resource_group=resource_group, name="lender", max_borrow_pct=0.5)
        for i, (vc, gpu) in enumerate([(vcluster_hpc, 8), (vcluster_hpc, 4), (lender, 2), (None, 8)]):
            Node.objects.create(name=f"n{i}", resource_group=resource_group, vcluster=vc, gpu=gpu, cpu=16, memory=64)
    name, need = ("nope" if "missing" in case else "hpc"), {"gpu": 4, "cpu": 0, "memory": 0}
    vc, summary = admission_sql.vcluster_and_nodes(resource_group.pk, name, tenant_physics.pk, need)
    alone = VCluster.objects.filter(resource_group=resource_group, name=name).first()
    assert (vc is None) == (alone is None) == ("missing" in case)
    if vc is not None:
        assert _columns(vc) == _columns(alone)
        assert (vc.restricted, vc.admitted) == {"open": (False, False), "not admitted": (True, False),
                                                "no nodes": (False, False)}[case]
    key = lambda row: str(row["vcluster_id"])  # noqa: E731
    assert sorted(summary, key=key) == sorted(admission_sql.node_summary(resource_group.pk, need), key=key)
    assert len(summary) == (0 if "no nodes" in case else 3)



def test_dependencies_are_read_as_drf_s_fields_read_them():
    """``depends_on``'s list field is copied flat, its child serializer deep-copied (the copies'
    isolation: ``test_the_flat_field_copies_are_drf_s_fields_and_each_serializer_s_own``)."""
    ours, generic = AllocationInput().fields["depends_on"], GenericInput().fields["depends_on"]
    body = [{"type": "afterok", "job": 7}, {"type": "afterany", "job": "8"}]
    assert ours.run_validation(body) == generic.run_validation(body) == [
        {"type": "afterok", "job": 7}, {"type": "afterany", "job": 8}]
    assert [(type(v), v.limit_value, str(v.message)) for v in ours.validators] == \
        [(type(v), v.limit_value, str(v.message)) for v in generic.validators] != []
