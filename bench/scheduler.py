"""Scheduler benchmark on PostgreSQL: decisions per second, latency, interference.

    DATABASE_URL=postgres://.../lattice python bench/scheduler.py [--quick]

Uses its own database (the URL's name + "_bench"), recreated each run. Builds a
10,000-node resource group with 50,000 running allocations, then measures, in
one process: a probe (single-row UPDATE commits per second from one client),
fitting and preempting decisions per second (pending to committed), the p99
from submission to committed placement at an offered 300 requests per second,
and fitting throughput while high-class preemptors arrive at 5 per second
(compared with the same batch alone).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import bench_database, use_bench_settings  # noqa: E402


def setup_django(url: str) -> None:
    use_bench_settings(url, log_level="WARNING")  # in-process layer: the bench measures the pass, not a broker
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from lattice_site import gc_tuning

    gc_tuning.for_long_running_process()  # passes run in the worker, which does this at start


def seed(n_nodes: int, n_allocs: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from nodes.models import Node
    from scheduling.models import (
        Allocation,
        Membership,
        Placement,
        Quota,
        ResourceGroup,
        Tenant,
        VCluster,
    )

    rnd = random.Random(1)
    group = ResourceGroup.objects.create(name="bench", policy={"kind": "class_cost", "max_victims": 4})
    main = VCluster.objects.create(resource_group=group, name="main", allow_lending=False)
    free = VCluster.objects.create(resource_group=group, name="free", allow_lending=False)
    users, tenants = [], []
    for i in range(10):
        tenant = Tenant.objects.create(name=f"t{i}")
        Quota.objects.create(tenant=tenant, max_nodes=10**6, max_gpus=10**7, max_concurrent_allocations=10**6,
                             max_preemption_class=10, fair_share=0.1)
        user = get_user_model().objects.create_user(f"u{i}", password="bench-password-1")
        Membership.objects.create(user=user, tenant=tenant)
        users.append(user)
        tenants.append(tenant)
    n_free = n_nodes // 5
    nodes = Node.objects.bulk_create([
        Node(name=f"n{i:05d}", resource_group=group, vcluster=main if i >= n_free else free, gpu=8, cpu=128,
             memory=1024, labels={"switch": f"s{i // 32}"}, state="ready") for i in range(n_nodes)])
    now = timezone.now()
    busy = nodes[n_free:]
    per_node = max(1, n_allocs // len(busy))
    allocs, where = [], []
    for node in busy:
        split = rnd.choice([[8], [4, 4], [4, 2, 2], [2, 2, 2, 2]])[:per_node]
        for gpu in split + [0] * (per_node - len(split)):
            k = rnd.randrange(10)
            allocs.append(Allocation(resource_group=group, tenant=tenants[k], user=users[k], vcluster=main,
                                     state="running", submitted_at=now, started_at=now, per_node_gpu=gpu,
                                     per_node_cpu=4, preemption_class=rnd.choice([0, 1, 2, 3]),
                                     checkpoint=rnd.choice(["auto", "manual", "none"])))
            where.append(node)
    allocs = Allocation.objects.bulk_create(allocs, batch_size=5000)
    Placement.objects.bulk_create([Placement(allocation=a, node=n, gpu=a.per_node_gpu, cpu=a.per_node_cpu)
                                   for a, n in zip(allocs, where, strict=True)], batch_size=5000)
    analyze()
    return {"group": group, "users": users, "tenants": tenants, "main": main, "free": free, "n_free": n_free}


def analyze() -> None:
    """Refresh the planner's statistics after a bulk change, as autovacuum does on a deployed
    database within a minute (the bench compresses that minute; it may run where autovacuum is
    off). Without them PostgreSQL takes the freshly filled tables for nearly empty ones: patching
    a kept snapshot after 3,000 allocations ended took 20 s in a nested loop over placements."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE")


def probe(seconds: float = 2.0) -> float:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_probe (id int primary key, n bigint)")
        cur.execute("INSERT INTO bench_probe VALUES (1, 0) ON CONFLICT DO NOTHING")
    count, end = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    with connection.cursor() as cur:
        while time.perf_counter() < end:
            cur.execute("UPDATE bench_probe SET n = n + 1 WHERE id = 1")  # autocommit: one commit each
            count += 1
    return count / (time.perf_counter() - start)


def pending(ctx: dict, n: int, *, vcluster, gpu: int, klass: int, name: str) -> None:
    from django.utils import timezone

    from scheduling.models import Allocation

    now = timezone.now()
    Allocation.objects.bulk_create([
        Allocation(resource_group=ctx["group"], tenant=ctx["tenants"][i % 10], user=ctx["users"][i % 10],
                   vcluster=vcluster, state="pending", submitted_at=now, per_node_gpu=gpu, preemption_class=klass,
                   checkpoint="auto", name=name) for i in range(n)], batch_size=5000)


def warm(ctx: dict) -> float:
    """A pass before the next batch is added: it loads the group's snapshot and keeps it, as a
    running service has it kept. Run after seeding or any bulk change from outside the
    scheduler, so that the rates measured next are the sustained ones; returns its seconds."""
    from scheduling.passes.run import schedule_pass

    start = time.perf_counter()
    schedule_pass(ctx["group"].pk)
    return time.perf_counter() - start


def prime(ctx: dict) -> float:
    """Decide and start one request, once per process: the first decision pays one-time costs
    (lazy imports, first use of numpy routines) that a running service paid long ago. Returns its
    pass's seconds; the request is then ended and the snapshot reloaded."""
    from scheduling.passes.run import schedule_pass

    pending(ctx, 1, vcluster=ctx["free"], gpu=1, klass=0, name="prime")
    start = time.perf_counter()
    schedule_pass(ctx["group"].pk)
    took = time.perf_counter() - start
    free_capacity(ctx, "prime")
    warm(ctx)
    return took


def drain(ctx: dict, name: str) -> tuple[int, float, int]:
    """Run passes until no request of this batch is pending; returns (decided, seconds, of which
    preemptions)."""
    from scheduling.models import Allocation
    from scheduling.passes.run import schedule_pass

    start = time.perf_counter()
    decided = preempted = 0
    while True:
        result = schedule_pass(ctx["group"].pk)
        decided += result.placed + result.preempted
        preempted += result.preempted
        left = Allocation.objects.filter(name=name, state="pending", placements__isnull=True).count()
        if left == 0 or (result.placed + result.preempted) == 0:
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


def free_capacity(ctx: dict, *names: str) -> None:
    """End the named batches (as if they completed) so their capacity is free again."""
    from scheduling.models import Allocation, Placement

    Placement.objects.filter(allocation__name__in=names).delete()
    Allocation.objects.filter(name__in=names).exclude(state="completed").update(state="completed")


def fits_rate(ctx: dict, name: str, n: int, preemptors_per_s: float = 0.0) -> tuple[int, float, int, int]:
    """Fitting decisions per second for a batch of n small requests, optionally while high-class
    preemptors (8 GPUs, 2 to 4 victims each) arrive at a steady rate. The batch must take more
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
                                      vcluster=ctx["main"], state="pending", submitted_at=timezone.now(),
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
    placed = Allocation.objects.filter(name=name, state="running").count()
    return placed, secs, arrived[0], preempted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_nodes, n_allocs = (2000, 10_000) if args.quick else (10_000, 50_000)
    setup_django(bench_database("_bench", "bench/scheduler.py"))
    t = time.perf_counter()
    ctx = seed(n_nodes, n_allocs)
    print(f"seeded {n_nodes:,} nodes and {n_allocs:,} running allocations in {time.perf_counter() - t:.0f} s")
    print(f"snapshot load (a first pass, empty queue): {warm(ctx) * 1e3:.0f} ms")
    print(f"first decision of the process (one-time costs, not measured below): {prime(ctx) * 1e3:.0f} ms")

    rate = probe()
    print(f"probe: {rate:,.0f} single-row UPDATE commits/s (one client)")

    fits_n = 3000 if args.quick else 8000
    pending(ctx, fits_n, vcluster=ctx["free"], gpu=1, klass=0, name="fit")
    decided, secs, _ = drain(ctx, "fit")
    fit_rate = decided / secs
    print(f"fitting decisions: {decided:,} in {secs:.1f} s = {fit_rate:,.0f}/s "
          f"({fit_rate / rate:.2f}x probe; goal >= 1000/s and >= 0.35x)")

    free_capacity(ctx, "fit")  # room for every request offered next
    warm(ctx)
    p50, p99, n = latency_at(ctx, 300, 5 if args.quick else 10)
    print(f"pending -> committed at 300 req/s offered: {n:,} placed, p50 {p50 * 1e3:.0f} ms, "
          f"p99 {p99 * 1e3:.0f} ms (goal p99 <= 50 ms)")

    # Interference: the same batch of small fitting requests, alone and with preemptors arriving.
    # Larger than one pass's budget, so that preemptors arriving meanwhile are decided among them.
    # Batches alternate alone, mixed, mixed, alone, ... so that a machine drifting in speed
    # (seen: 10-20% within a minute) weighs on both sides alike; the rates are pooled.
    inter_n = 3000 if args.quick else 6000
    free_capacity(ctx, "lat")
    totals = {False: [0, 0.0], True: [0, 0.0]}
    arrived = decided = 0
    for i, mixed in enumerate([False, True, True, False] * (1 if args.quick else 2)):
        warm(ctx)
        placed, secs, came, chosen = fits_rate(ctx, f"inter{i}", inter_n, preemptors_per_s=5.0 if mixed else 0.0)
        totals[mixed][0] += placed
        totals[mixed][1] += secs
        arrived, decided = arrived + came, decided + chosen
        free_capacity(ctx, f"inter{i}")
    alone, mixed_rate = (totals[k][0] / totals[k][1] for k in (False, True))
    print(f"fitting decisions alone {alone:,.0f}/s, with preemptors arriving at 5/s {mixed_rate:,.0f}/s "
          f"({arrived} arrived, {decided} preempted among the batches): {mixed_rate / alone:.2f}x (goal >= 0.90x)")
    warm(ctx)

    # Last: no agents run here, so these victims never report and their preemptors keep waiting.
    pre_n = 300 if args.quick else 1000
    pending(ctx, pre_n, vcluster=ctx["main"], gpu=8, klass=9, name="pre")
    decided, secs, _ = drain(ctx, "pre")
    print(f"preempting decisions: {decided:,} in {secs:.1f} s = {decided / secs:,.0f}/s (goal >= 250/s)")


if __name__ == "__main__":
    main()
