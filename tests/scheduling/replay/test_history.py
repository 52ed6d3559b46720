"""--format lattice and --group: a group's own history replayed on the group, read from the database."""

from __future__ import annotations

import io
import json
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone


def test_group_history_replays_on_the_group_under_its_policy(node_gpu_a, make_allocation):
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    for i, (gpus, run_s) in enumerate([(8, 600), (8, 300), (4, 60)]):
        make_allocation(submitted_at=t0 + timedelta(seconds=i), started_at=t0 + timedelta(seconds=i),
                        ended_at=t0 + timedelta(seconds=i + run_s), per_node_gpu=gpus, state="completed")
    make_allocation(submitted_at=t0, per_node_gpu=1)  # never started: not history
    out = io.StringIO()
    call_command("replay", "rg-main", "--format", "lattice", "--group", "rg-main", "--json",
                 "--from", (t0 - timedelta(minutes=1)).isoformat(), stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["trace"]["jobs"] == 3
    assert doc["cluster"]["gpus"] == 8
    (policy,) = doc["policies"]
    assert policy["name"] == "rg-main" and policy["policy"]["kind"] == "class_cost"
    # one 8-GPU node: the three run one after the other, in submission order
    assert policy["summary"]["wait_p50_s"] == 599.0
    assert policy["summary"]["makespan_s"] == 960.0
