"""Scheduler benchmark on PostgreSQL: decisions per second, latency, interference.

    DATABASE_URL=postgres://.../lattice python bench/scheduler.py [--quick] [--case preempting]

Uses its own database (the URL's name + "_bench"), recreated each run. Builds a
10,000-node resource group with 50,000 running allocations, then measures, in
one process: fitting and preempting decisions per second (pending to committed)
and this process's CPU time per decision, the p99 from submission to committed
placement at an offered 300 requests per second, and fitting throughput while
high-class preemptors arrive at 50 per second in the batch's own vCluster,
competing with it (compared with the same batch alone). With REDIS_URL set, a
submission case: 4 clients of mixed tenants through the REST API (bench/submissions.py).

The probe is CPU-bound and in this process: sorted() of 50,000 floats, 1,000
samples; its busy share (CPU / wall) says whether the machine let it run, and a
ratio to a probe that ran less than 90% busy is "not valid". (The probe was a
single-row UPDATE, bound by the disk's fsync: it moved 354 to 2,388/s between
runs and said nothing of the pass's cost.) PostgreSQL's own CPU is not in the
CPU figures: it serves other databases on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import submissions  # noqa: E402
from bench.common import (  # noqa: E402
    CPU_BOUND,
    MIN_SAMPLES_P99,
    Meter,
    bench_database,
    min_median,
    pct,
    print_table,
    repeats_text,
    verdict,
)
from bench.scheduler_setup import free_capacity, pending, prime, seed, setup_django, warm  # noqa: E402


def probe(samples: int = MIN_SAMPLES_P99) -> tuple[float, float]:
    """CPU seconds per sorted() of 50,000 floats (median), and the busy share it ran at."""
    rnd = random.Random(0)
    data = [rnd.random() for _ in range(50_000)]
    cpu = []
    meter = Meter().start()
    for _ in range(samples):
        c = time.thread_time()
        sorted(data)
        cpu.append(time.thread_time() - c)
    meter.stop()
    return pct(cpu, 0.5), meter.busy


def drain(ctx: dict, name: str, meter: Meter | None = None) -> tuple[int, float, int]:
    """Run passes until no request of this batch is pending; returns (decided, seconds, of which
    preemptions). The meter, when given, runs over the passes (this process's CPU)."""
    from scheduling.models import Allocation
    from scheduling.passes.run import schedule_pass

    if meter is not None:
        meter.start()
    start = time.perf_counter()
    decided = preempted = 0
    while True:
        result = schedule_pass(ctx["group"].pk)
        decided += result.placed + result.preempted
        preempted += result.preempted
        left = Allocation.objects.filter(name=name, state="pending", placements__isnull=True).count()
        if left == 0 or (result.placed + result.preempted) == 0:
            if meter is not None:
                meter.stop()
            return decided, time.perf_counter() - start, preempted


def _submit(ids: dict, rate: float, seconds: float, go, done) -> None:  # noqa: ANN001
    """The load generator: offers requests at ``rate`` per second, as clients would, from its own
    process (a thread would take the scheduler's interpreter lock for every insert)."""
    import django

    django.setup()  # the environment came from the parent: the same database and settings
    from django.db import connections
    from django.utils import timezone

    from scheduling.models import Allocation

    Allocation.objects.exists()  # connected before the clock starts
    go.wait()
    i = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        due = start + i / rate
        if time.perf_counter() < due:
            time.sleep(max(0.0, due - time.perf_counter()))
        k = i % 10
        Allocation.objects.create(resource_group_id=ids["group"], tenant_id=ids["tenants"][k],
                                  user_id=ids["users"][k], vcluster_id=ids["free"], state="pending",
                                  submitted_at=timezone.now(), per_node_gpu=1, name="lat")
        i += 1
    connections.close_all()
    done.set()


def latency_at(ctx: dict, rate: float, seconds: float) -> tuple[float, float, int]:
    import multiprocessing

    from scheduling.models import Allocation
    from scheduling.passes.run import schedule_pass

    spawn = multiprocessing.get_context("spawn")  # a fresh process: the scheduler keeps its connections
    go, done = spawn.Event(), spawn.Event()
    ids = {"group": ctx["group"].pk, "tenants": [t.pk for t in ctx["tenants"]],
           "users": [u.pk for u in ctx["users"]], "free": ctx["free"].pk}
    submitter = spawn.Process(target=_submit, args=(ids, rate, seconds, go, done))
    submitter.start()
    go.set()
    while not done.is_set():
        schedule_pass(ctx["group"].pk)
    schedule_pass(ctx["group"].pk)
    submitter.join()
    rows = Allocation.objects.filter(name="lat", started_at__isnull=False).values_list("submitted_at", "started_at")
    lat = sorted((s - b).total_seconds() for b, s in rows)
    if not lat:
        return 0.0, 0.0, 0
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], len(lat)


def fits_rate(ctx: dict, name: str, n: int, preemptors_per_s: float = 0.0) -> tuple[int, float, int, int]:
    """Fitting decisions per second for a batch of n small requests, optionally while high-class
    preemptors (8 GPUs, a whole node: free, or the batch's own requests preempted) arrive at a
    steady rate in the batch's own vCluster. The batch must take more
    than one pass (PASS_BUDGET) for preemptors to be decided among its requests: those arriving
    during a pass are decided first in the next. Returns (placed, seconds, preemptors arrived, of
    which decided while the batch was drained)."""
    from django.db import connections
    from django.utils import timezone

    from scheduling.models import Allocation

    pending(ctx, n, vcluster=ctx["free"], gpu=1, klass=0, name=name)
    stop = threading.Event()
    arrived = [0]

    def arrivals() -> None:
        start = time.perf_counter()
        while not stop.is_set():
            due = start + arrived[0] / preemptors_per_s
            if time.perf_counter() < due:
                stop.wait(max(0.0, due - time.perf_counter()))
                continue
            k = arrived[0] % 10
            Allocation.objects.create(resource_group=ctx["group"], tenant=ctx["tenants"][k], user=ctx["users"][k],
                                      vcluster=ctx["free"], state="pending", submitted_at=timezone.now(),
                                      per_node_gpu=8, preemption_class=9, checkpoint="auto", name=f"{name}-pre")
            arrived[0] += 1
        connections.close_all()

    thread = threading.Thread(target=arrivals) if preemptors_per_s else None
    if thread is not None:
        thread.start()
    start = time.perf_counter()
    _, _, preempted = drain(ctx, name)
    secs = time.perf_counter() - start
    stop.set()
    if thread is not None:
        thread.join()
    placed = Allocation.objects.filter(name=name).exclude(state="pending").count()
    return placed, secs, arrived[0], preempted


def fitting(ctx: dict, n: int, repeats: int) -> dict[str, list[float]]:
    """Per repeat: fitting decisions per second (wall) and this process's CPU per decision."""
    got: dict[str, list[float]] = {"rate": [], "cpu": []}
    for r in range(repeats):
        pending(ctx, n, vcluster=ctx["free"], gpu=1, klass=0, name=f"fit{r}")
        meter = Meter()
        decided, secs, _ = drain(ctx, f"fit{r}", meter)
        got["rate"].append(decided / secs)
        got["cpu"].append(meter.cpu / max(1, decided))
        print(f"fitting decisions: {decided:,} in {secs:.1f} s = {decided / secs:,.0f}/s; "
              f"CPU {meter.cpu / max(1, decided) * 1e3:.3f} ms per decision ({meter.busy:.0%} busy)")
        free_capacity(ctx, f"fit{r}")  # room for every request offered next
        warm(ctx)
    return got


def latency(ctx: dict, seconds: float, repeats: int) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"p99": [], "samples": []}
    for _ in range(repeats):
        p50, p99, n = latency_at(ctx, 300, seconds)
        got["p99"].append(p99)
        got["samples"].append(n)
        print(f"pending -> committed at 300 req/s offered: {n:,} placed, p50 {p50 * 1e3:.0f} ms, "
              f"p99 {p99 * 1e3:.0f} ms")
        free_capacity(ctx, "lat")
        warm(ctx)
    return got


def interference(ctx: dict, n: int, rounds: int) -> tuple[float, float]:
    """Fitting alone and with preemptors arriving at 50/s in the batch's vCluster: (wall ratio,
    CPU ratio) of mixed to alone. Batches alternate alone, mixed, mixed, alone, ... so that a
    machine drifting in speed weighs on both sides alike; the rates are pooled."""
    totals = {False: [0, 0.0, 0.0], True: [0, 0.0, 0.0]}
    arrived = decided = 0
    for i, mixed in enumerate([False, True, True, False] * rounds):
        warm(ctx)
        cpu0 = time.process_time()
        placed, secs, came, chosen = fits_rate(ctx, f"inter{i}", n, preemptors_per_s=50.0 if mixed else 0.0)
        totals[mixed][0] += placed
        totals[mixed][1] += secs
        totals[mixed][2] += time.process_time() - cpu0
        arrived, decided = arrived + came, decided + chosen
        free_capacity(ctx, f"inter{i}", f"inter{i}-pre")
    alone, mixed_rate = (totals[k][0] / totals[k][1] for k in (False, True))
    cpu_alone, cpu_mixed = (totals[k][2] / max(1, totals[k][0]) for k in (False, True))
    print(f"fitting decisions alone {alone:,.0f}/s, with preemptors arriving at 50/s in the same vCluster "
          f"{mixed_rate:,.0f}/s ({arrived} arrived, {decided} preempted among the batches): "
          f"{mixed_rate / alone:.2f}x; CPU per fitting decision {cpu_alone * 1e3:.3f} ms alone, "
          f"{cpu_mixed * 1e3:.3f} ms mixed (the preemptors' decisions included)")
    warm(ctx)
    return mixed_rate / alone, cpu_alone / cpu_mixed


def preempting(ctx: dict, n: int, repeats: int) -> dict[str, list[float]]:
    """Last: no agents run here, so these victims never report and their preemptors keep waiting."""
    got: dict[str, list[float]] = {"rate": [], "cpu": []}
    for r in range(repeats):
        pending(ctx, n, vcluster=ctx["main"], gpu=8, klass=9, name=f"pre{r}")
        meter = Meter()
        decided, secs, _ = drain(ctx, f"pre{r}", meter)
        got["rate"].append(decided / secs)
        got["cpu"].append(meter.cpu / max(1, decided))
        print(f"preempting decisions: {decided:,} in {secs:.1f} s = {decided / secs:,.0f}/s; "
              f"CPU {meter.cpu / max(1, decided) * 1e3:.3f} ms per decision")
        warm(ctx)
    return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--case", choices=["all", "preempting"], default="all",
                        help="preempting: that case alone, on the freshly seeded group (the others not run)")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    n_nodes, n_allocs = (500, 2500) if args.quick else (10_000, 50_000)
    redis_url = os.environ.get("REDIS_URL", "")
    setup_django(bench_database("_bench", "bench/scheduler.py"))
    t = time.perf_counter()
    ctx = seed(n_nodes, n_allocs)
    print(f"seeded {n_nodes:,} nodes and {n_allocs:,} running allocations in {time.perf_counter() - t:.0f} s")
    print(f"snapshot load (a first pass, empty queue): {warm(ctx) * 1e3:.0f} ms")
    print(f"first decision of the process (one-time costs, not measured below): {prime(ctx) * 1e3:.0f} ms")
    probe_cpu, probe_busy = probe(100 if args.quick else MIN_SAMPLES_P99)
    print(f"probe sorted(50,000 floats): {probe_cpu * 1e3:.2f} ms CPU (median), ran {probe_busy:.0%} busy"
          + ("" if probe_busy >= CPU_BOUND else " (not CPU-bound: ratios to it are not valid)"))
    if args.case == "preempting":
        pre = preempting(ctx, 50 if args.quick else 1000, repeats)
        report(None, None, pre, None, None, (probe_cpu, probe_busy))
        return
    fit = fitting(ctx, 300 if args.quick else 8000, repeats)
    lat = latency(ctx, 2 if args.quick else 10, repeats)
    wall_ratio, cpu_ratio = interference(ctx, 300 if args.quick else 6000, 1 if args.quick else 2)
    pre = preempting(ctx, 50 if args.quick else 1000, repeats)
    subs = None
    if redis_url.startswith("redis://"):
        subs = submissions.run({**os.environ, "REDIS_URL": redis_url}, ctx["tokens"], 2 if args.quick else 10, repeats)
    else:
        print("submissions through the REST API: skipped (set REDIS_URL: the servers queue each pass there)")
    report(fit, lat, pre, subs, (wall_ratio, cpu_ratio), (probe_cpu, probe_busy))


def report(fit: dict | None, lat: dict | None, pre: dict, subs: dict | None, ratios: tuple[float, float] | None,
           probe_run: tuple[float, float]) -> None:
    """The goal table; the cases not run (None) have no row."""
    probe_cpu, probe_busy = probe_run
    probes = probe_busy >= CPU_BOUND

    def cpu_text(values: list[float]) -> str:
        mid = min_median(values)[1]
        return (f"{repeats_text(values, 1e3, ' ms', 3)} per decision = "
                f"{mid / probe_cpu:.2f} probes{'' if probes else ' (probe not valid)'}")

    rows = []
    if fit is not None:
        rows.append(("fitting: 1,000/s (<= 1 ms of CPU per decision)", cpu_text(fit["cpu"]),
                     repeats_text(fit["rate"], 1, "/s", 0), verdict(min_median(fit["cpu"])[1] <= 1e-3)))
    if lat is not None:
        rows.append(("p99 from submission to placement <= 50 ms at 300/s offered", "",
                     repeats_text(lat["p99"], 1e3, " ms", 0),
                     verdict(min_median(lat["p99"])[1] <= 0.05, min(lat["samples"]) >= MIN_SAMPLES_P99)))
    if ratios is not None:
        rows.append(("fitting with preemptors at 50/s in its vCluster >= 0.90x alone", f"{ratios[1]:.2f}x",
                     f"{ratios[0]:.2f}x", verdict(ratios[1] >= 0.9)))
    rows.append(("preempting: 500/s (<= 2 ms of CPU per decision)", cpu_text(pre["cpu"]),
                 repeats_text(pre["rate"], 1, "/s", 0), verdict(min_median(pre["cpu"])[1] <= 2e-3)))
    if subs is not None:
        rows.append((f"submissions through the API: {submissions.ANCHOR:,.0f}/s (Slurm's rate; <= 2 ms of the "
                     "servers' CPU each)", repeats_text(subs["cpu"], 1e3, " ms", 2) + " per submission",
                     f"{repeats_text(subs['rate'], 1, '/s', 0)}; p99 {repeats_text(subs['p99'], 1e3, ' ms', 1)}",
                     verdict(min_median(subs["cpu"])[1] <= submissions.GOAL_CPU_S)))
    print_table("scheduler (CPU: this process, or the API servers; PostgreSQL not counted)", rows)


if __name__ == "__main__":
    main()
