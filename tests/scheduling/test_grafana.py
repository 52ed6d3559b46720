"""docs/grafana/lattice.json: every metric its expressions use is one /metrics exposes."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.passes.run import schedule_pass

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "lattice.json"
METRIC = re.compile(r"\b(lattice_[a-z0-9_]+)")


def _expressions(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        exprs.append(query["query"] if isinstance(query, dict) else "")
    return [e for e in exprs if e]


def test_the_dashboard_is_grafana_json_with_the_panels_the_readme_lists():
    dashboard = json.loads(DASHBOARD.read_text())
    titles = [p["title"] for p in dashboard["panels"]]
    assert titles == ["GPU utilisation per resource group", "GPUs by state", "GPU-hours per hour by tenant",
                      "Decision latency", "Pending queue", "Preemptions per hour by reason"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(titles)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])
    assert "Decision latency" in DASHBOARD.parent.parent.parent.joinpath("README.md").read_text()


@pytest.mark.django_db
def test_every_metric_the_dashboard_uses_is_exposed(client, resource_group, vcluster_hpc, node_gpu_a,
                                                     make_allocation):
    # Some of everything, so that each family has samples: a preemption (checkpointed), a queue.
    low = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=2, checkpoint="auto",
                          vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                    vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    low.refresh_from_db()
    allocation_checkpoint_done(allocation=low, ok=True, location="/ckpt/1",
                               now=low.checkpoint_started_at + timedelta(seconds=5))
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1)

    response = client.get("/metrics")
    assert response.status_code == 200
    exposed = {s.name for family in text_string_to_metric_families(response.content.decode())
               for s in family.samples}
    used = {name for expr in _expressions(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(expr)}
    assert {"lattice_gpus", "lattice_tenant_gpu_hours_total", "lattice_decision_seconds_bucket",
            "lattice_pending_queue_length", "lattice_preemptions_total"} <= used
    assert used - exposed == set()
