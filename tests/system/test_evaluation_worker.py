"""Policy evaluations run by real Celery workers as deployed (the Procfile's thread-pool
``worker`` and the ``evaluator`` on the evaluations queue) on PostgreSQL and Redis: the figures
are those of ``manage.py replay --format lattice`` run on its own on the same
history with the same policies, and a cancel stops a running evaluation at a progress point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from nodes.models import Node
from scheduling.models import Membership, PolicyEvaluation, Quota, ResourceGroup, Tenant, VCluster
from tests.conftest import ROOT
from tests.scheduling.evaluation_helpers import POLICY_FIELDS, record_history
from tests.system.test_faults import Services, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(tmp_path):
    running = Services(tmp_path)
    running.worker()
    running.evaluator()
    wait_for(running.worker_ready, 90, "the worker to be ready", running)
    wait_for(lambda: running.worker_ready("evaluator"), 90, "the evaluator to be ready", running)
    yield running
    running.stop_all()


def _group(nodes: int) -> tuple[ResourceGroup, list[Tenant]]:
    group = ResourceGroup.objects.create(name="rg-eval", policy={"kind": "class_cost", "max_victims": 3})
    hpc = VCluster.objects.create(resource_group=group, name="hpc", type="hpc_batch")
    for i in range(nodes):
        Node.objects.create(name=f"e{i}", resource_group=group, vcluster=hpc, gpu=8, cpu=64, memory=512,
                            state="ready")
    tenants = []
    for name, share in (("physics", 0.6), ("chemistry", 0.4)):
        tenant = Tenant.objects.create(name=name)
        Quota.objects.create(tenant=tenant, max_nodes=8, max_gpus=64, max_concurrent_allocations=10,
                             fair_share=share)
        Membership.objects.create(user=get_user_model().objects.create_user(f"{name}-user"), tenant=tenant)
        tenants.append(tenant)
    return group, tenants


def _operator() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("eval-op", is_staff=True))
    return client


def _replay_command(tmp_path, evaluation: PolicyEvaluation) -> dict:
    """The replay command, in a process of its own, on the evaluation's group, window and policies."""
    for name, policy in (("current", evaluation.current_policy), ("edited", evaluation.candidate_policy)):
        (tmp_path / f"{name}.json").write_text(json.dumps(policy))
    db = connection.settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.test", "LOG_LEVEL": "WARNING",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
    group = evaluation.resource_group.name
    out = subprocess.run(
        [sys.executable, "manage.py", "replay", group, "--format", "lattice", "--group", group,
         "--from", evaluation.since.isoformat(), "--until", evaluation.until.isoformat(),
         "--policy", str(tmp_path / "current.json"), "--compare", str(tmp_path / "edited.json"), "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def test_the_worker_evaluates_a_group_history_as_the_replay_command_does(worker, tmp_path):
    group, tenants = _group(nodes=2)
    record_history(group, tenants, 300)
    client = _operator()
    response = client.post(f"/ops/groups/{group.name}/evaluations/", {
        **POLICY_FIELDS, "policy_kind": "fair_share", "policy_mode": "terminate", "policy_max_victims": "",
        "days": "3"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    evaluation = PolicyEvaluation.objects.get()
    wait_for(lambda: PolicyEvaluation.objects.get(pk=evaluation.pk).finished, 240, "the evaluation", worker)
    evaluation.refresh_from_db()
    assert evaluation.status == "done", evaluation.error
    expected = _replay_command(tmp_path, evaluation)
    assert expected["trace"]["jobs"] == 300
    assert expected["comparison"][0]["figures"]["preemptions"]["difference"] != 0  # the policies differ
    assert evaluation.report == expected
    assert evaluation.jobs_done == evaluation.jobs_total == 600
    page = client.get(f"/ops/groups/{group.name}/evaluations/{evaluation.pk}/").content.decode()
    wait95 = expected["comparison"][0]["figures"]["wait_p95_s"]
    assert f"<td>wait_p95_s</td><td>{wait95['baseline']}</td><td>{wait95['other']}</td>" in page


def test_cancel_stops_a_running_evaluation_in_the_worker(worker):
    group, tenants = _group(nodes=4)
    record_history(group, tenants, 3000, hours=72)  # a queue of thousands: minutes to replay
    client = _operator()
    client.post(f"/ops/groups/{group.name}/evaluations/", {**POLICY_FIELDS, "days": "7"})
    evaluation = PolicyEvaluation.objects.get()
    wait_for(lambda: PolicyEvaluation.objects.get(pk=evaluation.pk).status == "running", 60, "the start", worker)
    assert client.post(f"/ops/groups/{group.name}/evaluations/{evaluation.pk}/cancel/").status_code == 302
    wait_for(lambda: PolicyEvaluation.objects.get(pk=evaluation.pk).finished, 60, "the cancel", worker)
    evaluation.refresh_from_db()
    assert evaluation.status == "cancelled" and evaluation.report is None
    assert evaluation.jobs_done < evaluation.jobs_total == 6000
