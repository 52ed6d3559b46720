"""A three-job trace on one 4-GPU node whose outcome is worked out by hand, for each policy kind:
a big low job runs, a small important one arrives and preempts it, a small low one fills in.

Times in seconds. Checkpoints take 30 s (checkpoint_minutes 0.5); a stopped victim leaves at once."""

from __future__ import annotations

import pytest

from scheduling.engine import model as em
from scheduling.engine import parse_policy
from scheduling.replay.sim import Simulation
from scheduling.replay.spec import ClusterSpec
from scheduling.replay.trace import Job

NODE = [em.Node("n1", {"gpu": 4.0})]


def job(ident, submit, gpus, run, **kw):
    return Job(id=ident, name=str(ident), submit=float(submit), run=float(run), walltime=None, nodes=1,
               gpus=float(gpus), checkpoint="auto", checkpoint_minutes=0.5, **kw)


def run(jobs, policy, **spec):
    rec = Simulation(jobs, ClusterSpec("hand", NODE, **spec), parse_policy(policy)).run()
    return rec, {j.id: (rec.first_start.get(j.id), rec.finish.get(j.id)) for j in jobs}


def test_class_cost_checkpoints_the_low_job_and_the_small_one_fills_in():
    jobs = [job(1, 0, 4, 100, preemption_class=1), job(2, 10, 2, 50, preemption_class=5),
            job(3, 20, 2, 10, preemption_class=1)]
    rec, times = run(jobs, {"kind": "class_cost", "mode": "suspend"})
    # 10: job 2 preempts job 1, which checkpoints until 40 (10 s of its work kept, 90 left).
    # 40: job 2 starts on the freed node (it held it), job 1 (4 GPUs) waits, job 3 (2) fits: 40..50.
    # 90: job 2 ends, job 1 resumes: 90..180.
    assert times == {1: (0.0, 180.0), 2: (40.0, 90.0), 3: (40.0, 50.0)}
    assert (rec.decisions, sum(rec.preemptions.values())) == (1, 1)
    assert rec.checkpoint_gpu_s == pytest.approx(30 * 4)
    assert rec.lost_gpu_s == 0


def test_priority_requeue_loses_the_victims_work():
    jobs = [job(1, 0, 4, 100, priority=10), job(2, 10, 2, 50, priority=50), job(3, 20, 2, 10, priority=10)]
    rec, times = run(jobs, {"kind": "priority", "mode": "requeue", "preemptible_priority": 20})
    # 10: job 1 is stopped (requeue mode) and leaves at once: its 10 s on 4 GPUs are lost and it
    # starts over. Job 2 runs 10..60; job 3 fits beside it 20..30; job 1 runs again 60..160.
    assert times == {1: (0.0, 160.0), 2: (10.0, 60.0), 3: (20.0, 30.0)}
    assert rec.decisions == 1
    assert rec.lost_gpu_s == pytest.approx(10 * 4)
    assert rec.checkpoint_gpu_s == 0


def test_priority_terminate_stops_the_victim_for_good():
    jobs = [job(1, 0, 4, 100, priority=10), job(2, 10, 2, 50, priority=50)]
    rec, times = run(jobs, {"kind": "priority", "mode": "terminate", "preemptible_priority": 20})
    assert times == {1: (0.0, 10.0), 2: (10.0, 60.0)}
    assert rec.dropped == 1
    assert rec.lost_gpu_s == pytest.approx(10 * 4)


def test_queue_preemptive_queue_takes_from_preemptable_one():
    types = [em.SessionType("low", priority=1, preemptable=True),
             em.SessionType("high", priority=9, preemptive=True, preempts=(em.Preempts("low"),))]
    jobs = [job(1, 0, 4, 100, session_type="low"), job(2, 10, 2, 50, session_type="high"),
            job(3, 20, 2, 10, session_type="low")]
    rec, times = run(jobs, {"kind": "queue", "mode": "suspend"}, session_types=types)
    assert times == {1: (0.0, 180.0), 2: (40.0, 90.0), 3: (40.0, 50.0)}  # as class_cost: same shape
    assert rec.decisions == 1


def test_rank_higher_rank_takes_from_the_tenant_over_its_share():
    types = [em.SessionType("bulk", rank=1), em.SessionType("svc", rank=5, preemptive=True)]
    tenants = {"a": em.Tenant("a", fair_share=0.5), "b": em.Tenant("b", fair_share=0.5)}
    jobs = [job(1, 0, 2, 100, tenant="a", session_type="bulk"), job(2, 1, 2, 100, tenant="a", session_type="bulk"),
            job(3, 10, 2, 50, tenant="b", session_type="svc")]
    rec, times = run(jobs, {"kind": "rank", "mode": "suspend"}, session_types=types, tenants=tenants)
    # 10: b (share 0, under its 0.5) takes from a (share 1.0, still at 0.5 without one job): the
    # shortest-running job, 2, checkpoints until 40 (9 s kept, 91 left). 40: job 3 runs 40..90;
    # job 2 (bulk, not preemptive) waits for it and resumes 90..181.
    assert times == {1: (0.0, 100.0), 2: (1.0, 181.0), 3: (40.0, 90.0)}
    assert rec.decisions == 1


def test_fair_share_preempts_once_the_tenant_starves():
    tenants = {"a": em.Tenant("a", fair_share=0.5), "b": em.Tenant("b", fair_share=0.5)}
    jobs = [job(1, 0, 4, 100, tenant="a"), job(2, 10, 2, 50, tenant="b"), job(3, 20, 2, 10, tenant="a")]
    rec, times = run(jobs, {"kind": "fair_share", "mode": "suspend", "starvation_timeout_s": 30,
                            "aggressive_starvation_timeout_s": 30}, tenants=tenants)
    # b is below its share (0 < 0.5 x 0.8) with work pending from 10, starving at 40: job 1 (a, over
    # its share) checkpoints until 70 (40 s kept, 60 left). 70: job 2 starts (held node), job 3 fits
    # 70..80; job 1 needs the whole node and b is within its share, so job 1 waits for job 2: 120..180.
    assert times == {1: (0.0, 180.0), 2: (70.0, 120.0), 3: (70.0, 80.0)}
    assert rec.decisions == 1
    assert rec.tenants["b"].starving_s == pytest.approx(30)  # below 10..70, starving past 40
