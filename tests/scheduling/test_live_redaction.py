"""The live feed shows a tenant what REST shows it: its own allocations by id, another tenant's
counted, never named. Real WebSocket clients (the ASGI application) for two tenants and an operator."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client, override_settings
from django.utils import timezone

from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.scheduling.test_live import _comm, _events, no_subscribers  # noqa: F401  (its autouse fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def _browser(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def test_a_decision_names_only_the_readers_own_victims(resource_group, vcluster_hpc, two_nodes, tenant_physics,
                                                       tenant_chemistry, operator):
    """chemistry's class-7 request for two nodes preempts physics' job on one and its own on the other."""
    def job(tenant, klass, nodes=1):
        return Allocation.objects.create(
            resource_group=resource_group, vcluster=vcluster_hpc, tenant=tenant,
            user=tenant.memberships.first().user, submitted_at=timezone.now(), state="pending",
            node_count=nodes, per_node_gpu=8, preemption_class=klass, checkpoint="none")

    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        physics_low, chemistry_low = job(tenant_physics, 1), job(tenant_chemistry, 1)
        schedule_pass(resource_group.pk)
    assert set(Allocation.objects.filter(state="running").values_list("pk", flat=True)) == {
        physics_low.pk, chemistry_low.pk}
    alice, bob = (tenant.memberships.first().user for tenant in (tenant_physics, tenant_chemistry))

    def preempt():
        with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
            job(tenant_chemistry, 7, nodes=2)
            schedule_pass(resource_group.pk)

    browsers = [_browser(u) for u in (operator, alice, bob)]

    async def scenario():
        sockets = [_comm(b) for b in browsers]
        for socket in sockets:
            assert (await socket.connect(timeout=10))[0]
            await socket.receive_json_from(timeout=5)  # hello
        await database_sync_to_async(preempt)()
        seen = []
        for socket in sockets:
            got: list[dict] = []
            while not any(e["kind"] == "decision" for e in got) and len(got) < 20:
                got += await _events(socket, 1)
                if socket is sockets[1]:  # alice hears her job leave, never the decision
                    break
            seen.append(got)
            await socket.disconnect()
        return seen

    ops, physics, chemistry = async_to_sync(scenario)()
    ops_decision = next(e for e in ops if e["kind"] == "decision")
    assert sorted(ops_decision["victims"]) == sorted([str(physics_low.pk), str(chemistry_low.pk)])
    chem_decision = next(e for e in chemistry if e["kind"] == "decision")
    assert chem_decision["victims"] == [str(chemistry_low.pk)]
    assert chem_decision["other_victims"] == 1
    named = {str(i) for e in chemistry for i in [e.get("allocation"), *e.get("allocations", []),
                                                 *e.get("victims", [])] if i is not None}
    assert str(physics_low.pk) not in named
    assert all(e["kind"] != "decision" for e in physics)
    # The feed's words: operators read every job's tenant and size; a tenant reads its own jobs'
    # details only, and never another tenant's name, anywhere in any frame.
    assert ops_decision["jobs"][str(physics_low.pk)] == {"tenant": "physics", "group": "rg-main", "nodes": 1,
                                                         "gpus": 8}
    assert ops_decision["group"] == "rg-main"
    assert set(chem_decision["jobs"]) == {str(chem_decision["preemptor"]), str(chemistry_low.pk)}
    assert {j["tenant"] for e in chemistry for j in e.get("jobs", {}).values()} == {"chemistry"}
    assert "physics" not in json.dumps(chemistry)
    assert physics and "chemistry" not in json.dumps(physics)


def test_a_preemptions_decision_is_sent_before_its_victims_leave(resource_group, vcluster_hpc, two_nodes,
                                                                 tenant_physics, tenant_chemistry):
    """The live feed hears the decision first, then the victims' state changes: its commit's other
    sends (commands, deadlines, states) never delay the decision."""
    def job(tenant, klass, nodes=1):
        return Allocation.objects.create(
            resource_group=resource_group, vcluster=vcluster_hpc, tenant=tenant,
            user=tenant.memberships.first().user, submitted_at=timezone.now(), state="pending",
            node_count=nodes, per_node_gpu=8, preemption_class=klass, checkpoint="none")

    sent: list[tuple[str, str | None]] = []

    def record(events, targets, seen):
        sent.extend((kind, payload.get("state")) for kind, payload, _ in events)

    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        job(tenant_physics, 1), job(tenant_chemistry, 1)
        schedule_pass(resource_group.pk)
        with mock.patch("scheduling.dispatch._send_events", record):
            job(tenant_chemistry, 7, nodes=2)
            schedule_pass(resource_group.pk)
    kinds = [kind for kind, _ in sent]
    assert "decision" in kinds
    leaving = [i for i, (kind, state) in enumerate(sent) if kind == "allocation.state" and state == "terminating"]
    assert len(leaving) == 2
    assert kinds.index("decision") < min(leaving)
