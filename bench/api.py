"""History API benchmark: list and detail latency with 100,000 and with 1,000,000 stored decisions.

    DATABASE_URL=postgres://.../lattice python bench/api.py [--seconds 20] [--quick]

On its own database (the URL's name + "_api_bench"), fills decision records
(a third of them preemptions with two victims, their audience and victim rows),
then serves the real application from two Daphne processes, each on a port
of its own, and drives it with 4 concurrent keep-alive clients in a closed
loop, two on each server as a balancer would spread them, each its own process (latency runs from sending a request to its
response's last byte): an operator's and a tenant's decision lists (first page and pages
deep behind a cursor), a group-filtered list, a decision's detail, the tenant's
allocation list and an allocation's history. The same requests are measured
at 100k and again after growing the table to 1M; the goal is p99 at most 30 ms
at both sizes and the 1M p99 at most 1.5x the 100k p99.

Everything grows with the decision count: one allocation per 5 decisions, each
with 5 events in its history, so the lists and histories read at 1M are ten times
those at 100k. Deep pages are 1,000 pages behind the first (walked through the
API's own cursors); details and histories are of allocations and decisions drawn
at random from 200 of each, as 4 tenants' clients (not one) ask for them. Each
size is measured --repeats times: min and median of the p99s, and the two API
servers' CPU time per request beside them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    Meter,
    bench_database,
    min_median,
    pct,
    print_table,
    repeats_text,
    use_bench_settings,
    verdict,
)

TENANTS = 16
PER_ALLOCATION = 5  # decisions per allocation, and events per allocation
DEPTH = 1000  # pages behind the first
CLIENTS = 4
SERVERS = 2
GOAL_P99_MS = 30.0
GOAL_GROWTH = 1.5




def setup_tenants() -> dict[str, str]:
    """A resource group, tenants with one member each, an operator, allocations; API tokens by role."""
    from django.contrib.auth import get_user_model

    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Membership, Quota, ResourceGroup, Tenant

    User = get_user_model()
    ResourceGroup.objects.create(name="bench", policy={"kind": "class_cost"})
    tenants = Tenant.objects.bulk_create([Tenant(name=f"t{i:02d}") for i in range(TENANTS)])
    Quota.objects.bulk_create([Quota(tenant=t, max_nodes=100, max_gpus=800, max_concurrent_allocations=100,
                                     fair_share=1 / TENANTS) for t in tenants])
    users = [User.objects.create_user(f"u{i:02d}", password=None) for i in range(TENANTS)]
    Membership.objects.bulk_create([Membership(user=u, tenant=t) for u, t in zip(users, tenants, strict=True)])
    operator = User.objects.create_user("op", password=None, is_staff=True)
    return {"operator": api_token_issue(user=operator),
            **{f"tenant{k}": api_token_issue(user=users[k]) for k in range(4)}}


def fill_allocations(count: int) -> int:
    """Allocations up to ``count`` in all (completed, of the tenants in turn), each with its history
    of PER_ALLOCATION events; returns how many there are."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from scheduling.models import Allocation, ResourceGroup, Tenant

    have = Allocation.objects.count()
    group = ResourceGroup.objects.get(name="bench")
    tenants = list(Tenant.objects.order_by("name"))
    users = {u.username: u for u in get_user_model().objects.filter(username__startswith="u")}
    now = timezone.now()
    for base in range(have, count, 20_000):
        made = Allocation.objects.bulk_create([
            Allocation(resource_group=group, tenant=tenants[i % TENANTS], user=users[f"u{i % TENANTS:02d}"],
                       submitted_at=now, state="completed", node_count=1, per_node_gpu=8, preemption_class=i % 11)
            for i in range(base, min(count, base + 20_000))], batch_size=5000)
        with connection.cursor() as cur:
            cur.execute("INSERT INTO scheduling_allocationevent (allocation_id, from_state, to_state, reason, "
                        "created_at) SELECT a, '', s, 'bench', now() - make_interval(secs => k) "
                        "FROM unnest(%s::bigint[]) a, generate_series(1, %s) k, "
                        "LATERAL (SELECT (ARRAY['pending','running','checkpointing','pending','completed'])[k]) x(s)",
                        [[a.pk for a in made], PER_ALLOCATION])
    return max(have, count)


def fill_decisions(url: str, start: int, stop: int) -> None:
    """Decision records start..stop-1 in SQL (fast), with audience and victim rows; one in three
    preempts. Preemptors and victims are drawn from all the allocations there are."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        lo, ALLOCATIONS = conn.execute("SELECT min(id), count(*) FROM scheduling_allocation").fetchone()
        group = conn.execute("SELECT id FROM scheduling_resourcegroup WHERE name = 'bench'").fetchone()[0]
        step = 100_000
        for base in range(start, stop, step):
            top = min(stop, base + step)
            conn.execute(f"""
                INSERT INTO scheduling_preemptiondecision
                    (id, resource_group_id, preemptor_id, created_at, decided_for, result, code, trigger, nodes,
                     borrowed, victims, candidates, explanation, policy_snapshot, outcome, latency_ms)
                SELECT i, {group}, {lo} + (i * 7919) % {ALLOCATIONS},
                       now() - make_interval(secs => {stop} - i), now() - make_interval(secs => {stop} - i),
                       CASE WHEN i % 3 = 0 THEN 'preempt' ELSE 'wait' END,
                       CASE WHEN i % 3 = 0 THEN 'PREEMPT' ELSE 'NO_CAPACITY' END,
                       CASE WHEN i % 3 = 0 THEN 'priority' ELSE '' END,
                       jsonb_build_array('n' || (i % 997)), '[]'::jsonb,
                       CASE WHEN i % 3 = 0 THEN jsonb_build_array(
                           jsonb_build_object('id', ({lo} + (i * 31) % {ALLOCATIONS})::text, 'action', 'checkpoint',
                                              'reason', 'lower class'),
                           jsonb_build_object('id', ({lo} + (i * 37) % {ALLOCATIONS})::text, 'action', 'checkpoint',
                                              'reason', 'lower class'))
                       ELSE '[]'::jsonb END,
                       (SELECT jsonb_agg(jsonb_build_object('id', ({lo} + (i + k) % {ALLOCATIONS})::text,
                                                            'verdict', 'ineligible', 'code', 'CLASS_NOT_LOWER',
                                                            'cost', k))
                        FROM generate_series(1, 40) k),
                       'Waiting: no node has the capacity the request needs.', '{{"kind": "class_cost"}}'::jsonb,
                       CASE WHEN i % 3 = 0 THEN 'executed' ELSE 'recorded' END, 1.5
                FROM generate_series({base}::bigint, {top - 1}) i""")
            conn.execute(f"""
                INSERT INTO scheduling_preemptiondecision_victim_allocations (preemptiondecision_id, allocation_id)
                SELECT DISTINCT i, v FROM generate_series({base}::bigint, {top - 1}) i,
                    LATERAL (VALUES ({lo} + (i * 31) % {ALLOCATIONS}), ({lo} + (i * 37) % {ALLOCATIONS})) AS x(v)
                WHERE i % 3 = 0""")
            conn.execute(f"""
                INSERT INTO scheduling_decisionaudience (tenant_id, decision_id)
                SELECT DISTINCT a.tenant_id, d.id FROM scheduling_preemptiondecision d
                    JOIN scheduling_allocation a ON a.id = d.preemptor_id
                    WHERE d.id BETWEEN {base} AND {top - 1}
                UNION
                SELECT a.tenant_id, v.preemptiondecision_id FROM scheduling_preemptiondecision_victim_allocations v
                    JOIN scheduling_allocation a ON a.id = v.allocation_id
                    WHERE v.preemptiondecision_id BETWEEN {base} AND {top - 1}""")
        conn.execute("SELECT setval(pg_get_serial_sequence('scheduling_preemptiondecision', 'id'), "
                     f"{stop})")
        conn.execute("VACUUM ANALYZE")
        # The fill's writes are flushed now, not by a checkpoint spread over the measurement.
        conn.execute("CHECKPOINT")


def start_servers(env: dict[str, str], count: int) -> tuple[list[subprocess.Popen], list[int]]:
    """Daphne processes, each on a port of its own (the ports a load balancer would spread
    connections over); returns the processes and their ports once every one answers."""
    procs, ports = [], []
    for _ in range(count):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        ports.append(listener.getsockname()[1])
        procs.append(subprocess.Popen([sys.executable, "-m", "daphne", "--fd", str(listener.fileno()),
                                       "lattice_site.asgi:application"], cwd=ROOT, env=env,
                                      pass_fds=[listener.fileno()], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        listener.close()
    deadline = time.time() + 30
    waiting = list(ports)
    while waiting and time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", waiting[0], timeout=5)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            waiting.pop(0)
        except OSError:
            time.sleep(0.2)
    if waiting:
        raise SystemExit("the servers did not start")
    return procs, ports


class Client:
    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Token {token}", "Host": "127.0.0.1"}

    def fetch(self, path: str) -> tuple[int, bytes]:
        """Status and body, the body read to its last byte (what a request's latency runs to)."""
        self.conn.request("GET", path, headers=self.headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def get(self, path: str) -> tuple[int, dict]:
        status, body = self.fetch(path)
        return status, json.loads(body) if body else {}


def deep_pages(client: Client, path: str, depth: int) -> list[str]:
    """Cursor URLs 1..depth pages behind the first (as a client paging through history would hold)."""
    out = []
    for _ in range(depth):
        status, body = client.get(path)
        if status != 200 or not body.get("next"):
            break
        nxt = urlparse(body["next"])
        path = f"{nxt.path}?{nxt.query}"
        out.append(path)
    return out


def request_mix(port: int, tokens: dict[str, str], depth: int) -> list[tuple[str, str, list[str]]]:
    """(name, role, paths) for every request kind, with real cursors and ids taken from the server;
    each request draws one of its kind's paths at random."""
    op = Client(port, tokens["operator"])
    mix = [("ops list", "operator", ["/api/v1/preemptions/"]),
           ("ops list by group", "operator", ["/api/v1/preemptions/?resource_group=bench"]),
           ("ops deep page", "operator", deep_pages(op, "/api/v1/preemptions/", depth)[-3:])]
    for k in range(4):
        role = f"tenant{k}"
        client = Client(port, tokens[role])
        status, first = client.get("/api/v1/preemptions/?page_size=100")
        assert status == 200 and first["results"], f"tenant list failed: {status}"
        allocs = client.get("/api/v1/allocations/?page_size=100")[1]["results"]
        rng = random.Random(k)
        decisions = [f"/api/v1/preemptions/{d['id']}/" for d in first["results"]]
        histories = [f"/api/v1/allocations/{a['id']}/events/" for a in allocs]
        mix += [("tenant list", role, ["/api/v1/preemptions/"]),
                ("tenant detail", role, rng.sample(decisions, min(50, len(decisions)))),
                ("tenant allocations", role, ["/api/v1/allocations/"]),
                ("tenant history", role, rng.sample(histories, min(50, len(histories)))),
                ("tenant deep page", role, deep_pages(client, "/api/v1/preemptions/", depth)[-3:])]
    return [entry for entry in mix if entry[2]]


def client_loop(port: int, tokens: dict[str, str], mix: list[tuple[str, str, list[str]]], seed: int,
                start: float, seconds: float, out: Any) -> None:
    """One client (its own process, as real clients are: no lock shared with the others, whose
    work would otherwise sit inside this one's timings): requests back to back from ``start``,
    the first 2 s a warm-up; puts (timings by kind, errors) on ``out``."""
    rng = random.Random(seed)
    clients = {role: Client(port, token) for role, token in tokens.items()}
    by_kind: dict[str, list[float]] = {}
    errors: list[str] = []
    while time.time() < start:
        time.sleep(0.001)
    warm = time.perf_counter() + 2.0
    end = warm + seconds
    while (now := time.perf_counter()) < end:
        name, role, paths = rng.choice(mix)
        path = rng.choice(paths)
        t0 = time.perf_counter()
        status, _ = clients[role].fetch(path)
        took = time.perf_counter() - t0
        if status != 200:
            errors.append(f"{name}: {status}")
        elif now >= warm:
            by_kind.setdefault(name, []).append(took)
    out.put((by_kind, errors))


def measure(ports: list[int], tokens: dict[str, str], seconds: float, mix: list[tuple[str, str, list[str]]],
            meter: Meter) -> dict[str, list[float]]:
    """Every client's connections go to one server, client i's to server i mod N: connections
    spread evenly, as a balancer in front of the servers spreads them. (One socket shared by
    the servers lets whichever process wakes first take a connection: with 8 keep-alive
    connections one server often held six, and ran at its core's limit while the other idled.)"""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    start = time.time() + 3.0  # every client started (a spawned interpreter takes a moment) before any sends
    procs = [spawn.Process(target=client_loop, args=(ports[i % len(ports)], tokens, mix, i, start, seconds, out))
             for i in range(CLIENTS)]
    for proc in procs:
        proc.start()
    time.sleep(max(0.0, start + 2.0 - time.time()))  # the clients' warm-up
    meter.start()
    by_kind: dict[str, list[float]] = {}
    errors: list[str] = []
    for _ in procs:
        kinds, errs = out.get(timeout=seconds + 60)
        errors += errs
        for name, values in kinds.items():
            by_kind.setdefault(name, []).extend(values)
    meter.stop()
    for proc in procs:
        proc.join()
    if errors:
        print(f"  {len(errors)} failed requests, e.g. {errors[0]}")
    return by_kind


def report(label: str, by_kind: dict[str, list[float]], seconds: float, meter: Meter) -> tuple[float, float]:
    """Prints the run; returns (p99, servers' CPU per request)."""
    every = [x for values in by_kind.values() for x in values]
    p99 = pct(every, 0.99)
    cpu = meter.cpu / max(1, len(every))
    print(f"{label}: {len(every) / seconds:,.0f} requests/s, p50 {pct(every, 0.5) * 1e3:.1f} ms, "
          f"p99 {p99 * 1e3:.1f} ms ({len(every):,} samples); servers' CPU {cpu * 1e3:.2f} ms per request "
          f"({meter.busy:.0%} of a core)")
    for name in sorted(by_kind):
        values = by_kind[name]
        print(f"    {name:<20} n={len(values):>6}  p50 {pct(values, 0.5) * 1e3:6.1f} ms  "
              f"p99 {pct(values, 0.99) * 1e3:6.1f} ms")
    return p99, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--servers", type=int, default=SERVERS, help="Daphne processes, a port each")
    parser.add_argument("--quick", action="store_true", help="2k and 10k records, 3 s, pages 20 deep")
    args = parser.parse_args()
    depth = DEPTH
    if args.quick:
        args.small, args.large, args.seconds, args.repeats, depth = 2_000, 10_000, 3, 1, 20
    url = bench_database("_api_bench", "bench/api.py")
    env = use_bench_settings(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    tokens = setup_tenants()
    results: list[dict[str, list[float]]] = []
    filled = 1
    for size in (args.small, args.large):
        t0 = time.perf_counter()
        allocations = fill_allocations(size // PER_ALLOCATION)
        fill_decisions(url, filled, size + 1)
        filled = size + 1
        print(f"{size:,} decision records, {allocations:,} allocations with {allocations * PER_ALLOCATION:,} events "
              f"({time.perf_counter() - t0:.0f} s to fill)")
        servers, ports = start_servers(env, args.servers)
        got: dict[str, list[float]] = {"p99": [], "cpu": [], "samples": []}
        try:
            mix = request_mix(ports[0], tokens, depth)
            for _ in range(args.repeats):
                meter = Meter(*(p.pid for p in servers))
                timings = measure(ports, tokens, args.seconds, mix, meter)
                p99, cpu = report(f"  {CLIENTS} clients, {args.servers} server processes", timings, args.seconds, meter)
                got["p99"].append(p99)
                got["cpu"].append(cpu)
                got["samples"].append(sum(len(v) for v in timings.values()))
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait()
        results.append(got)
    goals(args, results)


def goals(args: argparse.Namespace, results: list[dict[str, list[float]]]) -> None:
    small, large = results
    growth_wall = min_median(large["p99"])[1] / min_median(small["p99"])[1]
    growth_cpu = min_median(large["cpu"])[1] / min_median(small["cpu"])[1]
    rows = []
    for size, got in ((args.small, small), (args.large, large)):
        rows.append((f"p99 <= {GOAL_P99_MS:.0f} ms at {size:,} decisions", repeats_text(got["cpu"], 1e3, " ms", 2)
                     + " per request", repeats_text(got["p99"], 1e3, " ms", 1),
                     verdict(min_median(got["p99"])[1] * 1e3 <= GOAL_P99_MS, min(got["samples"]) >= 1000)))
    rows.append((f"p99 at {args.large:,} <= {GOAL_GROWTH}x p99 at {args.small:,}", f"{growth_cpu:.2f}x (CPU per request)",
                 f"{growth_wall:.2f}x", verdict(growth_wall <= GOAL_GROWTH and growth_cpu <= GOAL_GROWTH)))
    print_table("history API (CPU: the two Daphne processes)", rows)


if __name__ == "__main__":
    main()
