"""The scheduler bench's group and its bookkeeping (bench/scheduler.py): Django set up on the
bench's database, a seeded resource group, pending batches, warm passes, capacity freed."""

from __future__ import annotations

import random
import time

from bench.common import use_bench_settings


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
    from scheduling.actions.tokens import api_token_issue

    return {"group": group, "users": users, "tenants": tenants, "main": main, "free": free, "n_free": n_free,
            "tokens": [api_token_issue(user=u) for u in users]}


def analyze() -> None:
    """Refresh the planner's statistics after a bulk change, as autovacuum does on a deployed
    database within a minute (the bench compresses that minute; it may run where autovacuum is
    off). Without them PostgreSQL takes the freshly filled tables for nearly empty ones: patching
    a kept snapshot after 3,000 allocations ended took 20 s in a nested loop over placements."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE")


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


def free_capacity(ctx: dict, *names: str) -> None:
    """End the named batches (as if they completed) so their capacity is free again."""
    from scheduling.models import Allocation, Placement

    Placement.objects.filter(allocation__name__in=names).delete()
    Allocation.objects.filter(name__in=names).exclude(state="completed").update(state="completed")
