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
from bench.common import bench_database, pct, use_bench_settings  # noqa: E402

TENANTS = 16
ALLOCATIONS = 20_000
CLIENTS = 4
SERVERS = 2
GOAL_P99_MS = 30.0
GOAL_GROWTH = 1.5




def setup_tenants() -> dict[str, str]:
    """A resource group, tenants with one member each, an operator, allocations; API tokens by role."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Allocation, Membership, Quota, ResourceGroup, Tenant

    User = get_user_model()
    group = ResourceGroup.objects.create(name="bench", policy={"kind": "class_cost"})
    tenants = Tenant.objects.bulk_create([Tenant(name=f"t{i:02d}") for i in range(TENANTS)])
    Quota.objects.bulk_create([Quota(tenant=t, max_nodes=100, max_gpus=800, max_concurrent_allocations=100,
                                     fair_share=1 / TENANTS) for t in tenants])
    users = [User.objects.create_user(f"u{i:02d}", password=None) for i in range(TENANTS)]
    Membership.objects.bulk_create([Membership(user=u, tenant=t) for u, t in zip(users, tenants, strict=True)])
    operator = User.objects.create_user("op", password=None, is_staff=True)
    now = timezone.now()
    Allocation.objects.bulk_create([
        Allocation(resource_group=group, tenant=tenants[i % TENANTS], user=users[i % TENANTS], submitted_at=now,
                   state="completed", node_count=1, per_node_gpu=8, preemption_class=i % 11)
        for i in range(ALLOCATIONS)], batch_size=5000)
    return {"operator": api_token_issue(user=operator), "tenant": api_token_issue(user=users[0])}


def fill_decisions(url: str, start: int, stop: int) -> None:
    """Decision records start..stop-1 in SQL (fast), with audience and victim rows; one in three preempts."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        lo = conn.execute("SELECT min(id) FROM scheduling_allocation").fetchone()[0]
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


def request_mix(port: int, tokens: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, role, path) for every request kind, with real cursors and ids taken from the server."""
    op, tenant = Client(port, tokens["operator"]), Client(port, tokens["tenant"])
    status, first = tenant.get("/api/v1/preemptions/")
    assert status == 200 and first["results"], f"tenant list failed: {status}"
    own_alloc = tenant.get("/api/v1/allocations/")[1]["results"][0]["id"]
    mix = [("ops list", "operator", "/api/v1/preemptions/"),
           ("ops list by group", "operator", "/api/v1/preemptions/?resource_group=bench"),
           ("tenant list", "tenant", "/api/v1/preemptions/"),
           ("tenant detail", "tenant", f"/api/v1/preemptions/{first['results'][0]['id']}/"),
           ("tenant allocations", "tenant", "/api/v1/allocations/"),
           ("tenant history", "tenant", f"/api/v1/allocations/{own_alloc}/events/")]
    mix += [("ops deep page", "operator", p) for p in deep_pages(op, "/api/v1/preemptions/", 20)[-3:]]
    mix += [("tenant deep page", "tenant", p) for p in deep_pages(tenant, "/api/v1/preemptions/", 20)[-3:]]
    return mix


def client_loop(port: int, tokens: dict[str, str], mix: list[tuple[str, str, str]], seed: int,
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
        name, role, path = rng.choice(mix)
        t0 = time.perf_counter()
        status, _ = clients[role].fetch(path)
        took = time.perf_counter() - t0
        if status != 200:
            errors.append(f"{name}: {status}")
        elif now >= warm:
            by_kind.setdefault(name, []).append(took)
    out.put((by_kind, errors))


def measure(ports: list[int], tokens: dict[str, str], seconds: float) -> dict[str, list[float]]:
    """Every client's connections go to one server, client i's to server i mod N: connections
    spread evenly, as a balancer in front of the servers spreads them. (One socket shared by
    the servers lets whichever process wakes first take a connection: with 8 keep-alive
    connections one server often held six, and ran at its core's limit while the other idled.)"""
    import multiprocessing

    mix = request_mix(ports[0], tokens)
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    start = time.time() + 3.0  # every client started (a spawned interpreter takes a moment) before any sends
    procs = [spawn.Process(target=client_loop, args=(ports[i % len(ports)], tokens, mix, i, start, seconds, out))
             for i in range(CLIENTS)]
    for proc in procs:
        proc.start()
    by_kind: dict[str, list[float]] = {}
    errors: list[str] = []
    for _ in procs:
        kinds, errs = out.get(timeout=seconds + 60)
        errors += errs
        for name, values in kinds.items():
            by_kind.setdefault(name, []).extend(values)
    for proc in procs:
        proc.join()
    if errors:
        print(f"  {len(errors)} failed requests, e.g. {errors[0]}")
    return by_kind


def report(label: str, by_kind: dict[str, list[float]], seconds: float) -> float:
    every = [x for values in by_kind.values() for x in values]
    p99 = pct(every, 0.99) * 1e3
    print(f"{label}: {len(every) / seconds:,.0f} requests/s, p50 {pct(every, 0.5) * 1e3:.1f} ms, "
          f"p99 {p99:.1f} ms (goal {GOAL_P99_MS:.0f} ms)")
    for name in sorted(by_kind):
        values = by_kind[name]
        print(f"    {name:<20} n={len(values):>6}  p50 {pct(values, 0.5) * 1e3:6.1f} ms  "
              f"p99 {pct(values, 0.99) * 1e3:6.1f} ms")
    return p99


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--servers", type=int, default=SERVERS, help="Daphne processes sharing the socket")
    parser.add_argument("--quick", action="store_true", help="10k and 100k records, 8 s each")
    args = parser.parse_args()
    if args.quick:
        args.small, args.large, args.seconds = 10_000, 100_000, 8
    url = bench_database("_api_bench", "bench/api.py")
    env = use_bench_settings(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    tokens = setup_tenants()
    results = []
    filled = 1
    for size in (args.small, args.large):
        t0 = time.perf_counter()
        fill_decisions(url, filled, size + 1)
        filled = size + 1
        print(f"{size:,} decision records ({time.perf_counter() - t0:.0f} s to fill)")
        servers, ports = start_servers(env, args.servers)
        try:
            timings = measure(ports, tokens, args.seconds)
            results.append(report(f"  {CLIENTS} clients, {args.servers} server processes", timings, args.seconds))
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait()
    small, large = results
    print(f"p99 at {args.large:,} / p99 at {args.small:,}: {large / small:.2f}x (goal at most {GOAL_GROWTH}x)")



if __name__ == "__main__":
    main()
