"""Replay benchmark: the Compute Canada Slurm trace's GPU jobs under class_cost and fair_share.

    python bench/replay.py              # the full trace when present, else the repository's sample
    python bench/replay.py --jobs 3000  # the first N GPU jobs only

The full public trace is read from ``../shared/traces/computecanada_slurm_2021_jobs_compact.csv.gz``
relative to the repository when it is there (the benches' place for optional data), else
``scheduling/replay/samples/``. The cluster: ``--nodes`` nodes of ``--gpus`` GPUs (default 48 x 4),
tenants' fair shares equal, small enough that work queues and is preempted (both are printed).

Printed per policy: jobs/s (wall and CPU time), peak memory (the process's maximum resident set,
trace included), and the time per job against a bare heapq loop that pushes and pops as many
events in the same time order (goals: >= 5,000 jobs/s, < 1 GiB, <= 20x the bare loop).
"""

from __future__ import annotations

import argparse
import heapq
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduling.engine import model as em  # noqa: E402
from scheduling.engine import parse_policy  # noqa: E402
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


def bare_loop(jobs: list[Job], events: int) -> float:
    """Push and pop ``events`` heap entries shaped as the simulation's, in the trace's time order."""
    started = time.perf_counter()
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
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--nodes", type=int, default=48)
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args()
    trace = FULL if FULL.exists() else SAMPLE
    spec = ClusterSpec(f"{args.nodes}x{args.gpus}", [em.Node(f"n{i:04d}", {"gpu": float(args.gpus)})
                                                      for i in range(args.nodes)], default_fair_share="equal")
    t0 = time.perf_counter()
    jobs, stats = load_trace(str(trace), "slurm-csv", str(MAPPING), spec, limit=args.jobs)
    print(f"trace: {trace.name} ({'full' if trace == FULL else 'sample'}), {stats.message()}, "
          f"read in {time.perf_counter() - t0:.1f} s")
    print(f"cluster: {args.nodes} nodes x {args.gpus} GPUs, equal fair shares over {len({j.tenant for j in jobs})} "
          f"tenants; mapping {MAPPING.name}")
    for name, doc in POLICIES.items():
        sim = Simulation(jobs, spec, parse_policy(doc))
        wall, cpu = time.perf_counter(), time.process_time()
        rec = sim.run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        bare = bare_loop(jobs, sim.seq + len(jobs))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        waits = sorted(rec.first_start[j.id] - j.submit for j in jobs if j.id in rec.first_start)
        print(f"{name}: {len(jobs)} jobs in {wall:.1f} s wall, {cpu:.1f} s CPU: {len(jobs) / wall:.0f} jobs/s "
              f"(goal >= 5000); peak RSS {peak:.0f} MiB (goal < 1024); {wall / max(bare, 1e-9):.0f}x the bare "
              f"heapq loop of {sim.seq + len(jobs)} events ({bare * 1000:.0f} ms; goal <= 20x)")
        print(f"    preemptions {rec.decisions} ({sum(rec.preemptions.values())} victims), "
              f"wait p50 {waits[len(waits) // 2] if waits else 0:.0f} s, max queue seen in means "
              f"{max(rec.queue_bins, default=0) / rec.bins.width:.0f}")


if __name__ == "__main__":
    main()
