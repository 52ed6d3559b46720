"""Usage series benchmark: chart reads through the server, and what the series' writing costs a pass.

    DATABASE_URL=postgres://.../lattice python bench/usage.py [--seconds 20] [--repeats 2] [--only charts|pass]
                                                              [--quick]

On its own database (the URL's name + "_usage_bench"), seeds the scheduler bench's group
(bench/scheduler_setup.py: 10,000 nodes, 50,000 running allocations; 500 and 2,500 with --quick)
and fills its usage series in SQL as the sampler and the folding leave them: minute rows for the
last 2 days, 15-minute rows to 60 days, day rows to a year. Then three measurements:

1. A group's 30-day chart (`GET /api/v1/usage/series/?scope=group&range=30d`, 2 days of minutes
   and 28 of quarters re-bucketed to 4 hours) from two Daphne processes and 4 keep-alive clients
   in a closed loop (bench/api.py's servers and clients): p99 at most 30 ms. The servers cache
   the answer (scheduling/usage_series.py) in Redis when REDIS_URL is set, as deployed (else in
   each process's memory); nothing is written meanwhile, so all but the first read of each
   minute are served from it. The same chart is then read with the cache off
   (LATTICE_USAGE_SERIES_CACHE_SECONDS=0): what a read costs when a sample was written since.
   Between them, /healthz/live through the same servers: the floor any request costs there.
2. A tenant's 30-day chart, first with one tenant holding 30 days of history, then after the
   table has grown to a year of history for 1,000 tenants (8.7 million rows; 20 tenants with
   --quick): the second p99 and CPU per request at most 1.5x the first (the read must cost the
   rows it returns, not the rows stored beside them), with the cache off.
3. A scheduler pass's fitting throughput with and without the sampler writing at the same time
   (another process sampling the latest 10 minutes of every scope back to back, far more often
   than the minute it runs in service), alternating alone, with, with, alone: the pass's CPU
   per decision with the sampler at most 1.05x alone (5 % of its throughput); the wall-clock
   ratio beside it carries the two processes sharing the machine's cores.

Each measurement is repeated (--repeats): min and median, the servers' (or this process's) CPU
time per request (per decision) beside the wall clock. PostgreSQL's CPU is not counted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.api import measure, start_servers  # noqa: E402
from bench.common import (  # noqa: E402
    MIN_SAMPLES_P99,
    Meter,
    bench_database,
    min_median,
    pct,
    print_table,
    repeats_text,
    verdict,
)
from bench.scheduler import drain  # noqa: E402
from bench.scheduler_setup import analyze, free_capacity, pending, prime, seed, setup_django, warm  # noqa: E402

GOAL_P99_MS = 30.0
GOAL_GROWTH = 1.5
GOAL_PASS = 1.05
SERVERS = 2

# One segment per resolution: (resolution, interval, oldest age, youngest age) as the folding keeps them.
SEGMENTS = ((60, "1 minute", "2 days", "0 days"), (900, "15 minutes", "60 days", "2 days"),
            (86400, "1 day", "365 days", "60 days"))


def fill(url: str, scope: str, ids: list[int], group: int, days: int, skip: int = 0) -> int:
    """Rows for each of ``ids`` (a scope of the group) from ``days`` ago to ``skip`` days ago, at the
    resolutions the folding leaves at each age, in SQL; returns how many."""
    import psycopg

    total = 0
    with psycopg.connect(url, autocommit=True) as conn:
        end = conn.execute("SELECT date_bin('1 minute', now(), 'epoch')").fetchone()[0]
        for resolution, step, oldest, youngest in SEGMENTS:
            cur = conn.execute(f"""
                INSERT INTO scheduling_usagesample (resolution, start, scope, scope_id, resource_group_id,
                    gpu_used, cpu_used, memory_used, gpu_held, gpu_borrowed, gpu_free, pending, pending_gpus,
                    preemptions, gpu_hours_lost, checkpoint_seconds)
                SELECT {resolution}, ts, %(scope)s, sid, {group}, 40 + 20 * sin(extract(epoch from ts) / 3600),
                       320, 2048, (extract(epoch from ts)::bigint / 60) %% 3, 2, 20, 3, 24,
                       CASE WHEN (extract(epoch from ts)::bigint / 60) %% 37 = 0 THEN '{{"priority": 1}}'::jsonb
                            ELSE '{{}}'::jsonb END, 0.5, 30
                FROM unnest(%(ids)s::bigint[]) sid,
                     generate_series(date_bin('{step}', %(end)s - interval '{oldest}', 'epoch'),
                                     %(end)s - interval '{youngest}' - interval '{step}', interval '{step}') ts
                WHERE ts >= %(end)s - make_interval(days => %(days)s)
                  AND ts < %(end)s - make_interval(days => %(skip)s)
                ON CONFLICT DO NOTHING""",
                               {"scope": scope, "ids": ids, "end": end, "days": days, "skip": skip})
            total += cur.rowcount
        conn.execute("VACUUM ANALYZE scheduling_usagesample")
    return total


def chart_p99(env: dict, tokens: dict, paths: list[str], seconds: float, repeats: int, label: str) -> dict:
    """p99 and the servers' CPU per request of ``paths`` from 4 clients, ``repeats`` times."""
    servers, ports = start_servers(env, SERVERS)
    got: dict[str, list[float]] = {"p99": [], "cpu": [], "samples": []}
    try:
        for _ in range(repeats):
            meter = Meter(*(p.pid for p in servers))
            timings = measure(ports, tokens, seconds, [(label, "operator", paths)], meter)
            every = timings.get(label, [])
            got["p99"].append(pct(every, 0.99))
            got["cpu"].append(meter.cpu / max(1, len(every)))
            got["samples"].append(len(every))
            print(f"  {label}: {len(every) / seconds:,.0f} requests/s, p50 {pct(every, 0.5) * 1e3:.1f} ms, "
                  f"p99 {pct(every, 0.99) * 1e3:.1f} ms ({len(every):,} samples); servers' CPU "
                  f"{got['cpu'][-1] * 1e3:.2f} ms per request ({meter.busy:.0%} of a core)")
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait()
    return got


def sampler(stop, ready, counts) -> None:  # noqa: ANN001
    """The series' writer, back to back: the latest 10 minutes of every scope computed from the
    records and written again (its own process, as the worker's task is)."""
    import django

    django.setup()  # the environment came from the parent: the same database and settings
    from datetime import timedelta

    from django.db import connections
    from django.utils import timezone

    from scheduling import usage
    from scheduling.models import MetricRollup, UsageSample

    ready.set()
    while not stop.is_set():
        end = usage.floor_to(timezone.now(), 60)
        begin = end - timedelta(minutes=10)
        UsageSample.objects.filter(resolution=60, start__gte=begin).delete()
        MetricRollup.objects.update_or_create(key=usage.MARK, defaults={"value": begin.timestamp()})
        counts.value += usage.sample(now=end)
    connections.close_all()


def pass_cost(ctx: dict, n: int, rounds: int) -> dict[str, list[float]]:
    """Fitting batches alone and with the sampler writing, alternating; per side and batch: this
    process's CPU per decision and decisions per second."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    got: dict[str, list[float]] = {"cpu_alone": [], "cpu_with": [], "rate_alone": [], "rate_with": []}
    for i, with_sampler in enumerate([False, True, True, False] * rounds):
        warm(ctx)
        stop, ready, counts = spawn.Event(), spawn.Event(), spawn.Value("i", 0)
        proc = spawn.Process(target=sampler, args=(stop, ready, counts)) if with_sampler else None
        if proc is not None:
            proc.start()
            ready.wait(60)
            time.sleep(1.0)  # its first round under way
        pending(ctx, n, vcluster=ctx["free"], gpu=1, klass=0, name=f"use{i}")
        meter = Meter()
        decided, secs, _ = drain(ctx, f"use{i}", meter)
        side = "with" if with_sampler else "alone"
        if proc is not None:
            stop.set()
            proc.join(120)
            if proc.exitcode != 0 or counts.value == 0:
                print(f"  (a batch not counted: the sampler failed or wrote nothing, exit {proc.exitcode})")
                free_capacity(ctx, f"use{i}")
                continue
        got[f"cpu_{side}"].append(meter.cpu / max(1, decided))
        got[f"rate_{side}"].append(decided / secs)
        print(f"  fitting {'with the sampler' if with_sampler else 'alone':<16} {decided:,} decisions in "
              f"{secs:.2f} s = {decided / secs:,.0f}/s, CPU {got[f'cpu_{side}'][-1] * 1e3:.3f} ms per decision"
              + (f"; the sampler wrote {counts.value} minutes meanwhile" if proc is not None else ""))
        free_capacity(ctx, f"use{i}")
    return got


def charts(args: argparse.Namespace, url: str, ctx: dict) -> tuple[dict, dict, dict, dict]:
    """Measurements 1 and 2: the group's chart, then the tenant's before and after the growth."""
    from django.contrib.auth import get_user_model

    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Tenant

    env = dict(os.environ)
    if args.redis:  # the servers' cache as deployed: one Redis shared by both processes
        env["REDIS_URL"] = args.redis
    print(f"the servers' cache: {'Redis' if args.redis else 'each process its own memory (no REDIS_URL)'}")
    group = ctx["group"]
    tokens = {"operator": api_token_issue(user=get_user_model().objects.create_user("op", is_staff=True))}
    t0 = time.perf_counter()
    rows = fill(url, "g", [group.pk], group.pk, 30)
    rows += fill(url, "t", [ctx["tenants"][0].pk], group.pk, 30)
    print(f"30 days for the group and one tenant: {rows:,} rows ({time.perf_counter() - t0:.0f} s)")
    group_path = [f"/api/v1/usage/series/?scope=group&name={group.name}&range=30d"]
    group_chart = chart_p99(env, tokens, group_path, args.seconds, args.repeats, "group 30-day chart")
    # The probe: what any request through the same servers and clients costs (no auth, no query).
    chart_p99(env, tokens, ["/healthz/live"], args.seconds, args.repeats, "probe: /healthz/live")
    # Every read afresh, as when a sample is written before each: the read itself, uncached.
    fresh = {**env, "LATTICE_USAGE_SERIES_CACHE_SECONDS": "0"}
    group_fresh = chart_p99(fresh, tokens, group_path, args.seconds, args.repeats, "group 30-day chart, uncached")
    tenant_path = [f"/api/v1/usage/series/?scope=tenant&name={ctx['tenants'][0].name}&range=30d"]
    small = chart_p99(fresh, tokens, tenant_path, args.seconds, args.repeats,
                      "tenant 30-day chart, 1 tenant, uncached")
    t0 = time.perf_counter()
    others = Tenant.objects.bulk_create([Tenant(name=f"x{i:04d}") for i in range(args.tenants - 1)])
    rows = fill(url, "t", [t.pk for t in others], group.pk, 365)
    rows += fill(url, "t", [ctx["tenants"][0].pk], group.pk, 365, skip=30)  # the measured tenant's year too
    print(f"a year for {args.tenants - 1:,} more tenants: {rows:,} rows ({time.perf_counter() - t0:.0f} s)")
    large = chart_p99(fresh, tokens, tenant_path, args.seconds, args.repeats,
                      f"tenant 30-day chart, {args.tenants:,} tenants with a year, uncached")
    return group_chart, group_fresh, small, large


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--only", choices=["charts", "pass"], help="one part alone (default: both)")
    parser.add_argument("--quick", action="store_true", help="500 nodes, 20 tenants, 3 s, 1 repeat")
    args = parser.parse_args()
    n_nodes, n_allocs, batch = (10_000, 50_000, 4000)
    if args.quick:
        args.seconds, args.repeats, args.tenants = 3, 1, 20
        n_nodes, n_allocs, batch = 500, 2500, 300
    args.redis = os.environ.get("REDIS_URL", "")  # this process runs without it (setup_django)
    url = bench_database("_usage_bench", "bench/usage.py")
    setup_django(url)
    ctx = seed(n_nodes, n_allocs)
    measured = charts(args, url, ctx) if args.only != "pass" else None
    cost = None
    if args.only != "charts":
        analyze()
        warm(ctx)
        prime(ctx)
        cost = pass_cost(ctx, batch, 1 if args.quick else args.repeats)
    report(args, measured, cost)


def report(args: argparse.Namespace, measured: tuple[dict, dict, dict, dict] | None, cost: dict | None) -> None:
    rows = []
    if measured is not None:
        group_chart, group_fresh, small, large = measured
        # No goal of its own (the goal table holds goals only): what a read after a new sample costs.
        print(f"\nthe group chart read afresh each time: {repeats_text(group_fresh['cpu'], 1e3, ' ms', 2)} of the "
              f"servers' CPU per request, p99 {repeats_text(group_fresh['p99'], 1e3, ' ms', 1)}")
        growth_wall = min_median(large["p99"])[1] / min_median(small["p99"])[1]
        growth_cpu = min_median(large["cpu"])[1] / min_median(small["cpu"])[1]
        rows += [
            (f"group 30-day chart p99 <= {GOAL_P99_MS:.0f} ms, 4 clients",
             repeats_text(group_chart["cpu"], 1e3, " ms", 2) + " per request",
             repeats_text(group_chart["p99"], 1e3, " ms", 1),
             verdict(min_median(group_chart["p99"])[1] * 1e3 <= GOAL_P99_MS,
                     min(group_chart["samples"]) >= MIN_SAMPLES_P99)),
            (f"tenant 30-day chart, {args.tenants:,} tenants with a year <= {GOAL_GROWTH}x one with 30 days",
             f"{growth_cpu:.2f}x ({repeats_text(small['cpu'], 1e3, ' ms', 2)} and "
             f"{repeats_text(large['cpu'], 1e3, ' ms', 2)} per request)",
             f"{growth_wall:.2f}x (p99 {repeats_text(small['p99'], 1e3, ' ms', 1)} and "
             f"{repeats_text(large['p99'], 1e3, ' ms', 1)})",
             verdict(growth_cpu <= GOAL_GROWTH and growth_wall <= GOAL_GROWTH,
                     min(small["samples"] + large["samples"]) >= MIN_SAMPLES_P99))]
    if cost is not None:
        cpu_ratio = min_median(cost["cpu_with"])[1] / min_median(cost["cpu_alone"])[1]
        rate_ratio = min_median(cost["rate_with"])[1] / min_median(cost["rate_alone"])[1]
        rows.append((
            f"a pass with the series written meanwhile: CPU per decision <= {GOAL_PASS}x alone",
            f"{cpu_ratio:.3f}x ({repeats_text(cost['cpu_alone'], 1e3, ' ms', 3)} alone, "
            f"{repeats_text(cost['cpu_with'], 1e3, ' ms', 3)} with)",
            f"{rate_ratio:.2f}x the decisions/s ({repeats_text(cost['rate_alone'], 1, '/s', 0)} alone, "
            f"{repeats_text(cost['rate_with'], 1, '/s', 0)} with)",
            verdict(cpu_ratio <= GOAL_PASS, bool(cost["cpu_with"]))))
    print_table("usage series (CPU: the two Daphne processes, or this process for the pass)", rows)


if __name__ == "__main__":
    main()
