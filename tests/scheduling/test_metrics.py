"""/metrics: the preemption counters from the records, folded into a rollup without double counting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.metrics import fold
from scheduling.models import Allocation, MetricRollup, PreemptionDecision
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


def _scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            # GPU-hours of running work grow with the clock (tests/scheduling/test_metrics_cluster.py)
            if sample.name != "lattice_tenant_gpu_hours_total":
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture
def one_preemption(resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    """A class-2 job checkpointed after 42 s for a class-7 one, then requeued."""
    def job(klass):
        return make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=klass,
                               checkpoint="auto", vcluster=vcluster_hpc)

    low = job(2)
    schedule_pass(resource_group.pk)
    job(7)
    schedule_pass(resource_group.pk)
    low.refresh_from_db()
    assert low.state == "checkpointing"
    allocation_checkpoint_done(allocation=low, ok=True, location="/ckpt/1",
                               now=low.checkpoint_started_at + timedelta(seconds=42))
    return low


def test_preemption_metrics_count_the_records(client, one_preemption):
    reason = PreemptionDecision.objects.get(result="preempt").victims[0]["reason"]
    got = _scrape(client)
    assert got[("lattice_preemptions_total", (("reason", reason), ("vcluster", "hpc")))] == 1
    assert got[("lattice_preemption_victim_requeue_total", ())] == 1
    assert got[("lattice_preemption_failed_checkpoint_total", ())] == 0
    assert got[("lattice_preemption_checkpoint_duration_seconds_count", ())] == 1
    assert got[("lattice_preemption_checkpoint_duration_seconds_sum", ())] == pytest.approx(42)
    assert got[("lattice_preemption_checkpoint_duration_seconds_bucket", (("le", "30"),))] == 0
    assert got[("lattice_preemption_checkpoint_duration_seconds_bucket", (("le", "60"),))] == 1


def test_folding_moves_counts_into_the_rollup_without_counting_twice(client, one_preemption, resource_group,
                                                                     vcluster_hpc, make_allocation):
    before = _scrape(client)
    later = timezone.now() + timedelta(hours=1)  # everything so far has settled
    fold(now=later)
    fold(now=later)  # a second fold finds nothing new
    assert MetricRollup.objects.get(key="mark:decisions").value == PreemptionDecision.objects.latest("id").pk
    assert _scrape(client) == before

    # New work after the mark is counted live, then once more folded: still once.
    low = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="none",
                          vcluster=vcluster_hpc, started_at=timezone.now())
    low.placements.create(node=vcluster_hpc.home_nodes.first(), gpu=8)
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=9, checkpoint="auto",
                    vcluster=vcluster_hpc)
    Allocation.objects.filter(state="pending", preemption_class=7).delete()  # keep the queue to the new one
    schedule_pass(resource_group.pk)
    live = _scrape(client)
    total = sum(v for (name, _), v in live.items() if name == "lattice_preemptions_total")
    assert total == sum(v for (name, _), v in before.items() if name == "lattice_preemptions_total") + 1
    fold(now=timezone.now() + timedelta(hours=2))
    assert _scrape(client) == live


def test_metrics_with_a_scrape_token_need_it_and_compare_its_digest(client, settings, operator):
    import io

    from django.core.management import call_command

    out, err = io.StringIO(), io.StringIO()
    call_command("metrics_token", stdout=out, stderr=err)
    token = out.getvalue().strip().splitlines()[-1]
    settings.METRICS_TOKEN_SHA256 = err.getvalue().split("METRICS_TOKEN_SHA256=")[1].split()[0]
    assert token not in err.getvalue()
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token[:-1]}x").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
    assert b"lattice_pending_queue_length" in client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").content
    client.force_login(operator)
    assert client.get("/metrics").status_code == 200


def test_metrics_without_a_token_are_closed_unless_public(client, settings, tenant_physics, django_user_model):
    settings.METRICS_TOKEN_SHA256 = ""
    settings.METRICS_PUBLIC = True
    assert client.get("/metrics").status_code == 200
    settings.METRICS_PUBLIC = False
    assert client.get("/metrics").status_code == 403
    client.force_login(django_user_model.objects.get(username="alice"))  # a tenant member is no operator
    assert client.get("/metrics").status_code == 403


def test_production_closes_metrics_by_default_and_refuses_a_malformed_digest(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.production",
           "SECRET_KEY": "k" * 20 + "0123456789abcdefghijklmnopqrstuvwxyz", "ALLOWED_HOSTS": "lattice.example",
           "LATTICE_VAR_DIR": str(tmp_path)}
    env.pop("METRICS_PUBLIC", None)
    env.pop("METRICS_TOKEN_SHA256", None)
    code = "import django; django.setup(); from django.conf import settings; print(settings.METRICS_PUBLIC)"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "False"
    bad = subprocess.run([sys.executable, "-c", code], env={**env, "METRICS_TOKEN_SHA256": "abc"},
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "METRICS_TOKEN_SHA256" in bad.stderr


def test_every_group_has_its_pending_queue_length_an_empty_one_zero(client, resource_group, make_allocation):
    from scheduling.models import ResourceGroup

    ResourceGroup.objects.create(name="idle", policy={"kind": "class_cost"})
    make_allocation(state="pending", node_count=1, per_node_gpu=8)
    make_allocation(state="running", node_count=1, per_node_gpu=8)
    scraped = _scrape(client)
    assert scraped[("lattice_pending_queue_length", (("resource_group", "rg-main"),))] == 1
    assert scraped[("lattice_pending_queue_length", (("resource_group", "idle"),))] == 0
