"""The incremental replay (the default) against the straightforward one, which asks the engine about
every waiting request at every event: the same report, byte for byte, for each policy kind on the
Compute Canada sample, and fewer decisions asked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from scheduling.engine import model as em
from scheduling.engine import parse_policy
from scheduling.replay.report import policy_report
from scheduling.replay.run import load_trace
from scheduling.replay.sim import Simulation
from scheduling.replay.spec import ClusterSpec, load_spec

SAMPLES = Path(__file__).resolve().parents[3] / "scheduling" / "replay" / "samples"
CC = SAMPLES / "computecanada_slurm_2021_gpu_jobs.first3000.csv.gz"
LOW, HIGH = em.SessionType("low", priority=1, preemptable=True), em.SessionType("high", priority=9, preemptive=True)
POLICIES = {
    "class_cost": json.loads((SAMPLES / "class_cost.json").read_text()),
    "fair_share": json.loads((SAMPLES / "fair_share.json").read_text()),
    "priority": {"kind": "priority", "mode": "requeue", "preemptible_priority": 20, "min_runtime_minutes": 0},
    "class_cost_no_min_runtime": {"kind": "class_cost", "mode": "terminate", "max_victims": 2},
    "queue": {"kind": "queue", "mode": "suspend"},
    "rank": {"kind": "rank", "mode": "suspend"},
    "fcfs_without_preemption": {"kind": "class_cost", "enabled": False},
}


def both(jobs, spec, policy):
    out = []
    for incremental in (False, True):
        sim = Simulation(jobs, spec, policy, incremental=incremental, seed=3, checkpoint_jitter=0.3)
        rec = sim.run()
        out.append((json.dumps(policy_report("p", policy, jobs, rec), sort_keys=True), sim.engine_calls, rec))
    return out


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_incremental_replay_gives_the_straightforward_report(name):
    base = load_spec(str(SAMPLES / "cluster-cc.json"))
    spec = ClusterSpec("cc-24x4", base.nodes[:24], session_types=[LOW, HIGH], default_fair_share="equal")
    jobs, _ = load_trace(str(CC), "slurm-csv", str(SAMPLES / "mapping-cc.json"), spec, limit=400)
    if name in ("queue", "rank"):  # every third job in the preemptive session type
        jobs = [replace(j, session_type="high" if j.id % 3 == 0 else "low") for j in jobs]
    (straight, straight_calls, rec), (incremental, incremental_calls, _) = both(jobs, spec, parse_policy(POLICIES[name]))
    assert incremental == straight
    assert len(rec.first_start) > 350  # the sample ran, with a queue
    # queue and rank are passed over only where nothing fits and no running work is unprotected
    assert incremental_calls < straight_calls or name in ("queue", "rank") and incremental_calls <= straight_calls
