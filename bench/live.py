"""Live feed benchmark: from an agent's report to its event at 10 operator sockets.

    DATABASE_URL=postgres://... REDIS_URL=redis://... python bench/live.py [--reports 100] [--quick]

On its own database (the URL's name + "_live_bench") and the Redis database
REDIS_URL names (it deletes there only the keys that appeared during its run,
never flushes), runs Daphne and a Celery worker as in production, with simulated
agents heartbeating every 5 s in the background and 10 operator browsers
subscribed to /ws/live/ by session cookie. The measured group has 10,000 nodes
(--nodes), each full of running work. Three cases, one at a time:

- plain: an agent reports a running allocation exited; the event is its state
  change (goal: p99 at most 50 ms);
- decision: the exit frees a node a waiting request needs; the event is that
  request placed, after the scheduler pass decides and commits (goal: p99 at
  most 100 ms);
- preemption: a tenant submits a high-class request through the REST API; the
  event is its preemption decision on the 10,000-node group, decided and
  committed by the worker (goal: p99 at most 100 ms).

Beside the wall-clock latencies it prints the CPU time Daphne and the worker
spent per report or submission, and the p99 of each half of a case (min and
median of the two).

Latency is from the report leaving the agent to the event reaching each socket
(10 samples per report). A burst at the end checks coalescing: 200 state changes
at once must reach each socket in far fewer than 200 frames.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    Meter,
    bench_database,
    enough_for,
    forget_new_keys,
    free_port,
    min_median,
    pct,
    print_table,
    redis_keys,
    repeats_text,
    use_bench_settings,
    verdict,
)
from bench.live_clients import OPERATORS, Operators, Probe, background_agent  # noqa: E402


def prepare(background: int, reports: int, n_nodes: int) -> dict:
    """Groups, nodes with agent tokens, running and waiting work, operator sessions."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from nodes.actions import agent_token_issue
    from nodes.models import Node
    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Allocation, Membership, Placement, Quota, ResourceGroup, Tenant

    now = timezone.now()
    main = ResourceGroup.objects.create(name="bench", policy={"kind": "class_cost"})
    idle = ResourceGroup.objects.create(name="background", policy={"kind": "class_cost"})
    tenant = Tenant.objects.create(name="bench")
    Quota.objects.create(tenant=tenant, max_nodes=10_000, max_gpus=100_000, max_concurrent_allocations=10_000,
                         fair_share=1.0, max_preemption_class=10)
    user = get_user_model().objects.create_user("submitter")
    Membership.objects.create(user=user, tenant=tenant)
    quiet = Node.objects.bulk_create([Node(name=f"bg{i:05d}", resource_group=idle, gpu=8, state="ready",
                                           last_heartbeat_at=now) for i in range(background)])
    # The plain case's nodes are in the background group (no waiting work there); the decision
    # case's nodes are in the group where requests wait for exactly those nodes.
    probes = Node.objects.bulk_create([Node(name=f"p{i:05d}", resource_group=idle if i < reports else main, gpu=8,
                                            state="ready", last_heartbeat_at=now) for i in range(2 * reports)])
    running = Allocation.objects.bulk_create([
        Allocation(resource_group=n.resource_group, tenant=tenant, user=user, submitted_at=now, started_at=now,
                   state="running", node_count=1, per_node_gpu=8, preemption_class=5, ran_on=[n.name])
        for n in probes])
    Placement.objects.bulk_create([Placement(allocation=a, node=n, gpu=8) for a, n in zip(running, probes,
                                                                                            strict=True)])
    fill_group(main, n_nodes - reports, now)
    waiting = Allocation.objects.bulk_create([
        Allocation(resource_group=main, tenant=tenant, user=user, submitted_at=now, state="pending",
                   node_count=1, per_node_gpu=8, preemption_class=0) for _ in range(reports)])
    operator = get_user_model().objects.create_user("operator", is_staff=True)
    sessions = []
    for _ in range(OPERATORS):
        store = SessionStore()
        store["_auth_user_id"] = str(operator.pk)
        store["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        store["_auth_user_hash"] = operator.get_session_auth_hash()
        store.create()
        sessions.append(store.session_key)
    return {
        "background": [agent_token_issue(node=n) for n in quiet],
        "probes": [(agent_token_issue(node=n), str(a.pk)) for n, a in zip(probes, running, strict=True)],
        "waiting": {str(a.pk) for a in waiting},
        "sessions": sessions,
        "group": main.pk,
        "submitter": api_token_issue(user=user),
    }


def fill_group(group: object, count: int, now: object) -> None:
    """Nodes of the measured group beside the probes, each full: one 8-GPU allocation of a low
    class, of another tenant (so the submitter's quota is its own)."""
    from django.contrib.auth import get_user_model

    from nodes.models import Node
    from scheduling.models import Allocation, Membership, Placement, Tenant

    tenant = Tenant.objects.create(name="filler")
    user = get_user_model().objects.create_user("filler")
    Membership.objects.create(user=user, tenant=tenant)
    nodes = Node.objects.bulk_create([Node(name=f"m{i:05d}", resource_group=group, gpu=8, state="ready",
                                           last_heartbeat_at=now) for i in range(count)], batch_size=5000)
    running = Allocation.objects.bulk_create([
        Allocation(resource_group=group, tenant=tenant, user=user, submitted_at=now, started_at=now,
                   state="running", node_count=1, per_node_gpu=8, preemption_class=i % 3, checkpoint="auto",
                   ran_on=[n.name]) for i, n in enumerate(nodes)], batch_size=5000)
    Placement.objects.bulk_create([Placement(allocation=a, node=n, gpu=8) for a, n in zip(running, nodes, strict=True)],
                                  batch_size=5000)


async def scenario(port: int, data: dict, reports: int, pids: list[int]) -> dict[str, object]:
    agent_url = f"ws://127.0.0.1:{port}/ws/agent/"
    live_url = f"ws://127.0.0.1:{port}/ws/live/"
    stop = asyncio.Event()
    ready = asyncio.Event()
    ops = Operators()
    count = [0]
    tasks = [asyncio.create_task(ops.run(live_url, s, i, ready, count)) for i, s in enumerate(data["sessions"])]
    tasks += [asyncio.create_task(background_agent(agent_url, t, stop)) for t in data["background"]]
    probes = [Probe(agent_url, token, alloc) for token, alloc in data["probes"]]
    for i in range(0, len(probes), 50):
        await asyncio.gather(*(p.connect() for p in probes[i:i + 50]))
    await asyncio.wait_for(ready.wait(), 30)
    await asyncio.sleep(2.0)  # let the hello burst settle

    out: dict[str, object] = {"lost": 0}
    out["plain"], out["acks"], out["plain_cpu"] = await plain_case(ops, probes[:reports], pids, out)
    out["decision"], out["decision_cpu"] = await decision_case(ops, probes[reports:], data["waiting"], pids)
    await preemption_case(ops, port, data["submitter"], 2, [])  # the worker loads the group's snapshot
    out["preemption"], out["preemption_cpu"] = await preemption_case(ops, port, data["submitter"], reports, pids)

    frames0, events0 = list(ops.frames), list(ops.events)
    await burst()
    await asyncio.sleep(1.0)
    out["burst_frames"] = [f - f0 for f, f0 in zip(ops.frames, frames0, strict=True)]
    out["burst_events"] = [e - e0 for e, e0 in zip(ops.events, events0, strict=True)]
    stop.set()
    for task in tasks:
        task.cancel()
    return out


async def plain_case(ops: Operators, probes: list[Probe], pids: list[int], out: dict
                     ) -> tuple[list[float], list[float], float]:
    plain: list[float] = []
    acks: list[float] = []
    meter = Meter(*pids).start()
    for probe in probes:
        t0 = await probe.exit()
        got = await ops.wait_for(f"{probe.alloc}:completed")
        if got is None:
            out["lost"] = int(out["lost"]) + 1
        else:
            plain += [t - t0 for t in got]
            acks.append(probe.acked_at - t0)
        await asyncio.sleep(0.05)
    return plain, acks, meter.stop().cpu / max(1, len(probes))


async def decision_case(ops: Operators, probes: list[Probe], waiting: set[str], pids: list[int]
                        ) -> tuple[list[float], float]:
    decided: list[float] = []
    placed: set[str] = set()
    meter = Meter(*pids).start()
    for probe in probes:
        t0 = await probe.exit()
        end = time.perf_counter() + 10
        winner = None
        while winner is None and time.perf_counter() < end:
            for alloc in waiting - placed:
                if all(f"{alloc}:running" in seen for seen in ops.arrivals):
                    winner = alloc
                    break
            await asyncio.sleep(0.001)
        if winner is not None:
            placed.add(winner)
            decided += [seen[f"{winner}:running"] - t0 for seen in ops.arrivals]
        await asyncio.sleep(0.05)
    return decided, meter.stop().cpu / max(1, len(probes))


def submit(port: int, token: str) -> tuple[float, str]:
    """A high-class request through the REST API; (when it was sent, its id)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"resource_group": "bench", "per_node": {"gpu": 8}, "preemption_class": 9, "command": ["true"],
                       "checkpoint": "auto"})
    t0 = time.perf_counter()
    conn.request("POST", "/api/v1/allocations/", body=body,
                 headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    if response.status != 201:
        raise SystemExit(f"submission refused: {response.status} {answer}")
    return t0, str(answer["id"])


async def preemption_case(ops: Operators, port: int, token: str, count: int, pids: list[int]
                          ) -> tuple[list[float], float]:
    """Submissions one at a time; from each one's sending to its preemption decision at every socket."""
    decided: list[float] = []
    meter = Meter(*pids).start()
    for _ in range(count):
        t0, alloc = await asyncio.to_thread(submit, port, token)
        got = await ops.wait_for(f"{alloc}:decision", timeout=30)
        if got is not None:
            decided += [t - t0 for t in got]
        await asyncio.sleep(0.05)
    return decided, meter.stop().cpu / max(1, count)


async def burst() -> None:
    """200 state changes committed at once (as a pass placing a batch would)."""
    from asgiref.sync import sync_to_async

    def send() -> None:
        from django.db import transaction

        from scheduling.dispatch import event_on_commit

        with transaction.atomic():
            for n in range(200):
                event_on_commit("allocation.state", {"allocation": f"burst-{n}", "state": "queued"}, None)

    await sync_to_async(send, thread_sensitive=False)()


def halves(values: list[float]) -> list[float]:
    """The p99 of each half of a case's samples, in the order taken (two repeats of the case)."""
    mid = len(values) // 2
    return [pct(values[:mid], 0.99), pct(values[mid:], 0.99)]


def run(args: argparse.Namespace, redis_url: str) -> dict[str, object]:
    url = bench_database("_live_bench", "bench/live.py")
    env = use_bench_settings(url, redis_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    data = prepare(args.agents, args.reports, args.nodes)
    port = free_port()
    worker_env = {**env, "DB_STATEMENT_TIMEOUT_MS": "60000"}  # as the worker is started in production
    procs = [subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "--websocket_connect_timeout", "30", "lattice_site.asgi:application"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([sys.executable, "-m", "celery", "-A", "lattice_site", "worker", "--pool=threads",
                               "--concurrency=4", "--loglevel=ERROR"], cwd=ROOT, env=worker_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(150):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        time.sleep(3)  # the worker connects to the broker
        from scheduling.passes.run import schedule_pass

        schedule_pass(data["group"])  # the waiting requests get their first (NO_CAPACITY) decisions
        return asyncio.run(scenario(port, data, args.reports, [p.pid for p in procs]))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=500, help="background agents heartbeating every 5 s")
    parser.add_argument("--reports", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes of the measured group")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.reports, args.nodes = 20, 10, 300
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url.startswith("redis://"):
        sys.stderr.write("bench/live.py needs REDIS_URL\n")
        sys.exit(2)
    before = redis_keys(redis_url)
    try:
        out = run(args, redis_url)
    finally:
        print(f"({forget_new_keys(redis_url, before)} keys this run made in Redis deleted; none other touched)")
    report(args, out)


def report(args: argparse.Namespace, out: dict) -> None:
    print(f"{args.agents} background agents at 1 heartbeat/5 s, {OPERATORS} operator sockets, "
          f"{args.reports} reports per case, {args.nodes:,} nodes in the measured group")
    rows = []
    for key, label, goal in (("plain", "plain state change", 0.05), ("decision", "report -> decision -> placed", 0.1),
                             ("preemption", "submission -> preemption decision", 0.1)):
        values = out[key]
        print(f"{label}: p50 {pct(values, 0.5) * 1e3:.1f} ms, p99 {pct(values, 0.99) * 1e3:.1f} ms "
              f"({len(values)} arrivals), CPU {out[key + '_cpu'] * 1e3:.1f} ms per case")
        p99s = halves(values)
        rows.append((f"{label}: p99 <= {goal * 1e3:.0f} ms",
                     f"{out[key + '_cpu'] * 1e3:.1f} ms per {'submission' if key == 'preemption' else 'report'}",
                     repeats_text(p99s, 1e3, " ms", 1),
                     verdict(min_median(p99s)[1] <= goal, enough_for(values[: len(values) // 2], 0.99))))
    print(f"  (the report's ack, after its commit: p50 {pct(out['acks'], 0.5) * 1e3:.1f} ms, "
          f"p99 {pct(out['acks'], 0.99) * 1e3:.1f} ms)")
    if out.get("lost"):
        print(f"  {out['lost']} plain events never arrived at every socket")
    frames = max(out["burst_frames"])
    print(f"burst of 200 events: {frames} frames per socket at most ({min(out['burst_events'])} events each)")
    rows.append(("a burst of 200 events never one frame per event", "", f"{frames} frames per socket",
                 verdict(frames < 100 and min(out["burst_events"]) >= 200)))
    print_table("live feed (CPU: Daphne and the worker, background agents included)", rows)


if __name__ == "__main__":
    main()
