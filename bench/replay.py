"""Replay benchmark: the Compute Canada Slurm trace's GPU jobs under class_cost and fair_share, and
the start estimate of a 1,000-request queue on 10,000 nodes.

    python bench/replay.py                    # the full trace when present, else the repository's sample
    python bench/replay.py --jobs 3000        # the first N GPU jobs only
    python bench/replay.py --straightforward  # also the straightforward replay (every request, every event)
    python bench/replay.py --quick            # 600 jobs; the estimate on 1,000 nodes with 100 requests
    python bench/replay.py --only estimate    # the start estimate alone (--only replay: the trace alone)

The full public trace is read from ``../shared/traces/computecanada_slurm_2021_jobs_compact.csv.gz``
relative to the repository when it is there (the benches' place for optional data), else
``scheduling/replay/samples/``. The cluster: ``--nodes`` nodes of ``--gpus`` GPUs (default 48 x 4),
tenants' fair shares equal, small enough that work queues and is preempted (both are printed).

Printed per policy: jobs/s (CPU time and wall), the engine decisions asked, peak memory (the
process's maximum resident set, trace included), and the CPU time per job against a bare heapq loop
that pushes and pops as many events in the same time order (min of 3; it is the probe: "not valid"
when it ran under 90 % busy). Goals: >= 5,000 jobs/s, < 1 GiB, <= 20x the bare loop.

The estimate (``scheduling.replay.estimate``): 10,000 nodes of 8 GPUs, each held by one running
job (walltimes 1 to 24 h, started at random within them, classes 1 to 4), 1,000 single-node pending
requests (1 to 8 GPUs, classes 1 to 4, walltime 30 min to 4 h or none), under class_cost with
preemption, class_cost without, and fair_share; CPU time, min and median of 3. Goal: under 1 s.
"""

from __future__ import annotations

import argparse
import heapq
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import min_median, print_table, verdict  # noqa: E402
from scheduling.engine import Cluster, parse_policy  # noqa: E402
from scheduling.engine import model as em  # noqa: E402
from scheduling.replay.estimate import estimate_starts  # noqa: E402
from scheduling.replay.run import load_trace  # noqa: E402
from scheduling.replay.sim import Simulation  # noqa: E402
from scheduling.replay.spec import ClusterSpec  # noqa: E402
from scheduling.replay.trace import Job  # noqa: E402

FULL = ROOT.parent / "shared" / "traces" / "computecanada_slurm_2021_jobs_compact.csv.gz"
SAMPLE = ROOT / "scheduling" / "replay" / "samples" / "computecanada_slurm_2021_gpu_jobs.first3000.csv.gz"
MAPPING = ROOT / "scheduling" / "replay" / "samples" / "mapping-cc.json"
POLICIES = {
    "class_cost": {"kind": "class_cost", "mode": "suspend", "max_victims": 3, "min_runtime_minutes": 10},
    "fair_share": {"kind": "fair_share", "mode": "suspend", "starvation_timeout_s": 600,
                   "aggressive_starvation_timeout_s": 3600, "preemptive_scheduling_backoff_s": 60},
}


def bare_loop(jobs: list[Job], events: int) -> tuple[float, float]:
    """Push and pop ``events`` heap entries shaped as the simulation's, in the trace's time order:
    (CPU seconds, wall seconds)."""
    cpu, wall = time.process_time(), time.perf_counter()
    heap: list[tuple[float, int, int, int, int]] = []
    per_job = max(1, events // max(len(jobs), 1))
    seq = 0
    for j in jobs:
        for k in range(per_job):
            seq += 1
            heapq.heappush(heap, (j.submit + k * j.run, k & 3, seq, j.id, 0))
        while heap and heap[0][0] <= j.submit:
            heapq.heappop(heap)
    while heap:
        heapq.heappop(heap)
    return time.process_time() - cpu, time.perf_counter() - wall


def replay_rows(jobs: list[Job], spec: ClusterSpec, straightforward: bool) -> list[tuple[str, str, str, str]]:
    rows = []
    modes = (True, False) if straightforward else (True,)
    for name, doc in POLICIES.items():
        for incremental in modes:
            label = name if incremental else f"{name} (straightforward)"
            sim = Simulation(jobs, spec, parse_policy(doc), incremental=incremental)
            wall, cpu = time.perf_counter(), time.process_time()
            rec = sim.run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            events = sim.seq + len(jobs)
            bare = [bare_loop(jobs, events) for _ in range(3)]
            bare_cpu, bare_wall = min(b[0] for b in bare), min(b[1] for b in bare)
            busy = min(b[0] / b[1] for b in bare if b[1] > 0)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            waits = sorted(rec.first_start[j.id] - j.submit for j in jobs if j.id in rec.first_start)
            print(f"{label}: {len(jobs)} jobs in {cpu:.1f} s CPU ({len(jobs) / cpu:.0f} jobs/s), {wall:.1f} s wall "
                  f"({len(jobs) / wall:.0f} jobs/s); {sim.engine_calls} engine decisions; peak RSS {peak:.0f} MiB; "
                  f"{cpu / max(bare_cpu, 1e-9):.0f}x the bare heapq loop of {events} events in CPU "
                  f"({bare_cpu * 1000:.0f} ms, {busy:.0%} busy)")
            print(f"    preemptions {rec.decisions} ({sum(rec.preemptions.values())} victims), "
                  f"wait p50 {waits[len(waits) // 2] if waits else 0:.0f} s, max queue seen in means "
                  f"{max(rec.queue_bins, default=0) / rec.bins.width:.0f}")
            rows += [(f"{label}: >= 5,000 jobs/s", f"{len(jobs) / cpu:,.0f} jobs/s", f"{len(jobs) / wall:,.0f} jobs/s",
                      verdict(len(jobs) / cpu >= 5000)),
                     (f"{label}: peak RSS < 1 GiB", f"{peak:.0f} MiB", "-", verdict(peak < 1024)),
                     (f"{label}: <= 20x the bare heapq loop", f"{cpu / max(bare_cpu, 1e-9):,.0f}x",
                      f"{wall / max(bare_wall, 1e-9):,.0f}x", verdict(cpu <= 20 * bare_cpu, busy >= 0.9))]
    return rows


ESTIMATE_POLICIES = {
    "class_cost": {"kind": "class_cost", "mode": "suspend", "max_victims": 3, "min_runtime_minutes": 10},
    "class_cost without preemption": {"kind": "class_cost", "enabled": False},
    "fair_share": {"kind": "fair_share", "mode": "suspend"},
}


def estimate_case(nodes: int, pending: int) -> tuple[Cluster, list[em.Allocation], float]:
    rng = random.Random(1)
    now = 1_700_000_000.0
    tenants = [em.Tenant(f"t{i}", 0.05) for i in range(20)]
    running = []
    for i in range(nodes):
        wall = rng.choice([60, 120, 240, 480, 1440])
        started = now - rng.uniform(0, wall * 60)
        running.append(em.Allocation(
            id=str(100_000 + i), tenant=f"t{i % 20}", state="running", started_at=started, walltime_minutes=wall,
            per_node={"gpu": 8.0}, placement={f"n{i:05d}": {"gpu": 8.0}}, submitted_at=started - 60,
            preemption_class=rng.randint(1, 4)))
    cluster = Cluster([em.Node(f"n{i:05d}", {"gpu": 8.0}) for i in range(nodes)], running, tenants)
    queue = [em.Allocation(id=str(i + 1), tenant=f"t{i % 20}", per_node={"gpu": float(rng.choice([1, 2, 4, 8]))},
                           walltime_minutes=rng.choice([30, 60, 240, None]), submitted_at=now - 1000 + i,
                           preemption_class=rng.randint(1, 4)) for i in range(pending)]
    return cluster, queue, now


def estimate_rows(nodes: int, pending: int, repeats: int) -> list[tuple[str, str, str, str]]:
    cluster, queue, now = estimate_case(nodes, pending)
    rows = []
    for name, doc in ESTIMATE_POLICIES.items():
        policy = parse_policy(doc)
        cpus, walls = [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            starts = estimate_starts(cluster, policy, queue, now, default_walltime_s=4 * 3600.0)
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - wall)
        low, mid = min_median(cpus)
        later = sorted(at - now for at in starts.values() if at is not None)
        print(f"estimate, {name}: {pending} pending on {nodes} nodes: CPU min {low:.2f} s, median {mid:.2f} s; "
              f"wall min {min(walls):.2f} s ({repeats} repeats); {len(later)} start, the last after "
              f"{later[-1] / 3600 if later else 0:.2f} h")
        rows.append((f"estimate, {name}: {pending} pending on {nodes} nodes < 1 s", f"min {low:.2f} s, median {mid:.2f} s",
                     f"min {min(walls):.2f} s", verdict(mid < 1.0)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--nodes", type=int, default=48)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--straightforward", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("replay", "estimate"), help="run one part of the bench")
    parser.add_argument("--repeats", type=int, default=3, help="the estimate's repeats (default 3)")
    args = parser.parse_args()
    if args.only == "estimate":
        print_table("replay", estimate_rows(1000, 100, 1) if args.quick else estimate_rows(10_000, 1000, args.repeats))
        return
    trace = SAMPLE if args.quick else FULL if FULL.exists() else SAMPLE
    limit = 600 if args.quick else args.jobs
    spec = ClusterSpec(f"{args.nodes}x{args.gpus}", [em.Node(f"n{i:04d}", {"gpu": float(args.gpus)})
                                                      for i in range(args.nodes)], default_fair_share="equal")
    t0 = time.perf_counter()
    jobs, stats = load_trace(str(trace), "slurm-csv", str(MAPPING), spec, limit=limit)
    print(f"trace: {trace.name} ({'full' if trace == FULL else 'sample'}), {stats.message()}, "
          f"read in {time.perf_counter() - t0:.1f} s")
    print(f"cluster: {args.nodes} nodes x {args.gpus} GPUs, equal fair shares over {len({j.tenant for j in jobs})} "
          f"tenants; mapping {MAPPING.name}")
    rows = replay_rows(jobs, spec, args.straightforward)
    if args.only != "replay":
        rows += estimate_rows(1000, 100, 1) if args.quick else estimate_rows(10_000, 1000, args.repeats)
    print_table("replay", rows)


if __name__ == "__main__":
    main()
