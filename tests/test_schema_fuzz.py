"""The API against its own OpenAPI schema, fuzzed by Schemathesis, as a tenant (token) and as an
operator (token), through the real WSGI application on PostgreSQL: no request may answer 5xx, and
every answer must be documented (its status code, content type and body). Bounded and
derandomized, so CI runs the same examples each time, in well under three minutes."""

from __future__ import annotations

import os
import time

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXAMPLES = int(os.environ.get("LATTICE_FUZZ_EXAMPLES", "25"))
BUDGET_S = 150  # the whole run: later operations get fewer examples rather than overrun
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def world(resource_group, vcluster_hpc, two_nodes, tenant_physics, tenant_chemistry, operator):
    """Rows for the fuzzer to find: running and waiting work of two tenants, a cross-tenant
    preemption, a decision with a hold among its candidates, an audit entry; a token each for a
    tenant member and an operator (ids far from those the fuzzer tries, so it cannot revoke them)."""
    from scheduling.actions.overrides import group_pause
    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import (
        Allocation,
        ApiToken,
        DecisionAudience,
        PreemptionDecision,
        SessionType,
    )
    from scheduling.passes.run import schedule_pass

    SessionType.objects.create(resource_group=resource_group, name="batch")

    def job(tenant, klass, state="pending"):
        return Allocation.objects.create(
            resource_group=resource_group, vcluster=vcluster_hpc, tenant=tenant, state=state,
            user=tenant.memberships.first().user, submitted_at=timezone.now(), node_count=1,
            per_node_gpu=8, preemption_class=klass, checkpoint="auto")

    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        low = job(tenant_physics, 2)
        job(tenant_chemistry, 1)
        schedule_pass(resource_group.pk)
        high = job(tenant_chemistry, 7)
        schedule_pass(resource_group.pk)
    record = PreemptionDecision.objects.create(
        resource_group=resource_group, preemptor=low, decided_for=timezone.now(), result="wait",
        code="NO_VICTIMS", candidates=[{"id": f"hold:{high.pk}", "verdict": "excluded"}], explanation="waits")
    DecisionAudience.objects.create(tenant=tenant_physics, decision=record)
    group_pause(group=resource_group, paused=False, actor=operator, reason="fuzz")
    tokens = {}
    for n, user in enumerate([tenant_physics.memberships.first().user, operator]):
        secret = api_token_issue(user=user)
        ApiToken.objects.filter(user=user).update(id=10**12 + n)
        tokens["tenant" if n == 0 else "operator"] = secret
    return tokens


def test_the_api_answers_every_generated_request_as_its_schema_says(world):
    schema = schemathesis.openapi.from_wsgi("/api/schema/", WSGIHandler())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 30
    failures: list[str] = []
    started = time.monotonic()
    for n, (who, token) in enumerate(sorted(world.items())):
        for i, operation in enumerate(operations):
            left = BUDGET_S - (time.monotonic() - started)
            runs = (len(world) - n) * len(operations) - i
            examples = max(1, min(EXAMPLES, int(left / runs / 0.05)))
            failure = _fuzz(operation, token, examples)
            if failure:
                failures.append(f"{who}: {operation.label}: {failure}")
    assert not failures, "\n\n".join(failures)


def _fuzz(operation, token: str, examples: int) -> str | None:
    strategy = operation.as_strategy() | operation.as_strategy(GenerationMode.NEGATIVE)

    @given(case=strategy)
    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def run(case) -> None:
        case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=CHECKS)

    try:
        run()
    except Exception as exc:  # a failed check, with the request that made it
        return str(exc)[:3000]
    return None


def test_the_schema_documents_errors_and_reasons(client):
    import yaml

    doc = yaml.safe_load(client.get("/api/schema/").content)
    drain = doc["paths"]["/api/v1/nodes/{name}/drain/"]["post"]
    assert {"400", "403", "404"} <= set(drain["responses"])
    assert {"400", "409"} <= set(doc["paths"]["/api/v1/allocations/"]["post"]["responses"])
    schemas = doc["components"]["schemas"]
    for name in ("PatchedQuotaOutputRequest", "VClusterOutputRequest", "PauseInputRequest", "ReasonInputRequest"):
        assert "reason" in schemas[name]["required"], name
