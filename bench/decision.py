"""Decision engine benchmark: prints p50/p99 per kind and request shape, as ratios to a probe.

    python bench/decision.py            # 10k nodes x 50k and 100k allocations, 1,000 requests per case
    python bench/decision.py --quick    # fewer requests, for a smoke run

The probe, ``sorted()`` of 50,000 random floats, runs in the same process, so the
ratios hold on any machine. Goals (issue 3): single-node p99 <= 3x probe, 64-node
p99 <= 10x, the 100k case <= 2.2x the 50k case, an incremental update < 20 us.
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.synthetic import NOW, QUEUES, VCLUSTERS, build, requests  # noqa: E402
from scheduling.engine import Cluster, decide  # noqa: E402
from scheduling.engine.model import Policy  # noqa: E402

KINDS = ["class_cost", "priority", "queue", "rank", "fair_share"]
SHAPES = [1, 8, 64]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def probe(rounds: int = 60) -> tuple[float, float]:
    rnd = random.Random(0)
    data = [rnd.random() for _ in range(50_000)]
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        sorted(data)
        times.append(time.perf_counter() - t)
    return pct(times, 0.5), pct(times, 0.99)


def run_case(n_nodes: int, n_allocs: int, n_requests: int, probe_p99: float) -> dict[tuple[str, int], float]:
    nodes, allocs, tenants = build(n_nodes, n_allocs)
    builds = []
    for _ in range(2):
        t = time.perf_counter()
        cluster = Cluster(nodes, allocs, tenants, VCLUSTERS, QUEUES)
        builds.append(time.perf_counter() - t)
    print(f"\n== {n_nodes:,} nodes, {len(allocs):,} running allocations")
    print(f"snapshot build: {min(builds) * 1e3:.0f} ms")
    # incremental update: one allocation leaves and comes back (what applying a decision does)
    victim = allocs[len(allocs) // 2]
    removes, adds = [], []
    for _ in range(2000):
        t = time.perf_counter()
        cluster.remove(victim.id)
        removes.append(time.perf_counter() - t)
        t = time.perf_counter()
        cluster.add(victim)
        adds.append(time.perf_counter() - t)
    print(f"incremental update: remove p50 {statistics.median(removes) * 1e6:.1f} us, "
          f"add p50 {statistics.median(adds) * 1e6:.1f} us")
    p99s: dict[tuple[str, int], float] = {}
    print(f"{'kind':<11} {'nodes':>5} {'p50 ms':>8} {'p99 ms':>8} {'p99/probe':>10}  outcomes")
    for shape in SHAPES:
        reqs = requests(n_requests, shape)
        for kind in KINDS:
            policy = Policy(kind=kind, max_victims=None)
            # warm the snapshot's per-version caches (walk orders, costs) as a pass would
            for r in reqs[:5]:
                decide(cluster, policy, replace(r), NOW)
            times, outcomes = [], collections.Counter()
            for r in reqs:
                t = time.perf_counter()
                d = decide(cluster, policy, r, NOW)
                times.append(time.perf_counter() - t)
                outcomes[d.outcome] += 1
            p50, p99 = pct(times, 0.5), pct(times, 0.99)
            p99s[(kind, shape)] = p99
            mix = " ".join(f"{k}={v * 100 // len(reqs)}%" for k, v in sorted(outcomes.items()))
            print(f"{kind:<11} {shape:>5} {p50 * 1e3:>8.2f} {p99 * 1e3:>8.2f} {p99 / probe_p99:>10.2f}  {mix}")
    return p99s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int, default=None)
    args = parser.parse_args()
    n_requests = args.requests or (100 if args.quick else 1000)
    p50, p99 = probe()
    print(f"probe sorted(50,000 floats): p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")
    base = run_case(10_000, 50_000, n_requests, p99)
    big = run_case(10_000, 100_000, n_requests, p99)
    print("\n== goals")
    worst_single = max(base[(k, 1)] for k in KINDS) / p99
    worst_64 = max(base[(k, 64)] for k in KINDS) / p99
    ratios = sorted(big[key] / base[key] for key in base)
    growth = ratios[-1]
    print(f"single-node p99 / probe p99 (worst kind): {worst_single:.2f}  (goal <= 3)")
    print(f"64-node p99 / probe p99 (worst kind):     {worst_64:.2f}  (goal <= 10)")
    print(f"100k p99 / 50k p99 (worst case):          {growth:.2f}  (goal <= 2.2; median case "
          f"{ratios[len(ratios) // 2]:.2f})")


if __name__ == "__main__":
    main()
