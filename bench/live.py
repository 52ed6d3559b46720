"""Live feed benchmark: from an agent's report to its event at 10 operator sockets.

    DATABASE_URL=postgres://... REDIS_URL=redis://... python bench/live.py [--reports 100] [--quick]

On its own database (the URL's name + "_live_bench") and Redis database 5, runs
Daphne and a Celery worker as in production, with simulated agents heartbeating
every 5 s in the background and 10 operator browsers subscribed to /ws/live/
by session cookie. Two cases, one report at a time:

- plain: an agent reports a running allocation exited; the event is its state
  change (goal: p99 at most 50 ms);
- decision: the exit frees a node a waiting request needs; the event is that
  request placed, after the scheduler pass decides and commits (goal: p99 at
  most 100 ms).

Latency is from the report leaving the agent to the event reaching each socket
(10 samples per report). A burst at the end checks coalescing: 200 state changes
at once must reach each socket in far fewer than 200 frames.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import bench_database, free_port, pct, use_bench_settings  # noqa: E402

OPERATORS = 10
REDIS_DB = 5




def prepare(background: int, reports: int) -> dict:
    """Groups, nodes with agent tokens, running and waiting work, operator sessions."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from nodes.actions import agent_token_issue
    from nodes.models import Node
    from scheduling.models import Allocation, Membership, Placement, Quota, ResourceGroup, Tenant

    now = timezone.now()
    main = ResourceGroup.objects.create(name="bench", policy={"kind": "class_cost"})
    idle = ResourceGroup.objects.create(name="background", policy={"kind": "class_cost"})
    tenant = Tenant.objects.create(name="bench")
    Quota.objects.create(tenant=tenant, max_nodes=10_000, max_gpus=100_000, max_concurrent_allocations=10_000,
                         fair_share=1.0)
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
    }


class Operators:
    """10 browser sockets; every event's arrival time per socket, and frames counted."""

    def __init__(self) -> None:
        self.arrivals: list[dict[str, float]] = []  # per socket: key -> first arrival
        self.frames = [0] * OPERATORS
        self.events = [0] * OPERATORS

    async def run(self, url: str, session: str, index: int, ready: asyncio.Event, count: list[int]) -> None:
        import websockets

        self.arrivals.append({})
        seen = self.arrivals[index]
        headers = {"Cookie": f"sessionid={session}", "Origin": "http://127.0.0.1"}
        async with websockets.connect(url, additional_headers=headers, max_size=2**22) as ws:
            await ws.recv()  # hello
            count[0] += 1
            if count[0] == OPERATORS:
                ready.set()
            async for text in ws:
                now = time.perf_counter()
                frame = json.loads(text)
                self.frames[index] += 1
                for event in frame.get("events", []):
                    self.events[index] += 1
                    ids = [event["allocation"]] if "allocation" in event else event.get("allocations", [])
                    for alloc in ids:
                        seen.setdefault(f"{alloc}:{event.get('state', 'running')}", now)

    async def wait_for(self, key: str, timeout: float = 10.0) -> list[float] | None:
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            if all(key in seen for seen in self.arrivals):
                return [seen[key] for seen in self.arrivals]
            await asyncio.sleep(0.001)
        return None


async def background_agent(url: str, token: str, stop: asyncio.Event) -> None:
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.send(json.dumps({"type": "hello", "id": uuid.uuid4().hex, "agent_version": "bench",
                                  "capacity": {"gpu": 8}, "labels": {}, "running": []}))
        await asyncio.sleep(5 * (hash(token) % 1000) / 1000)
        drain = asyncio.create_task(_drain(ws))
        while not stop.is_set():
            await ws.send(json.dumps({"type": "heartbeat", "id": uuid.uuid4().hex, "seq": time.time_ns() // 1000,
                                      "running": []}))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 5.0)
        drain.cancel()


async def _drain(ws: object) -> None:
    with contextlib.suppress(Exception):  # a dropped background agent only stops heartbeating
        async for _ in ws:  # type: ignore[attr-defined]
            pass


class Probe:
    """An agent whose one allocation is running; it reports the exit when told."""

    def __init__(self, url: str, token: str, alloc: str) -> None:
        self.url, self.token, self.alloc = url, token, alloc
        self.ws: object = None
        self.frame_id = ""
        self.acked_at = 0.0

    async def connect(self) -> None:
        import websockets

        self.ws = await websockets.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"})
        await self.ws.send(json.dumps({"type": "hello", "id": uuid.uuid4().hex, "agent_version": "bench",  # type: ignore[attr-defined]
                                       "capacity": {"gpu": 8}, "labels": {},
                                       "running": [{"allocation": self.alloc, "phase": "running", "pid": 1}]}))
        asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for text in self.ws:  # type: ignore[attr-defined]
            frame = json.loads(text)
            if frame.get("type") == "ack" and frame.get("id") == self.frame_id:
                self.acked_at = time.perf_counter()

    async def exit(self) -> float:
        t0 = time.perf_counter()
        self.frame_id = uuid.uuid4().hex
        await self.ws.send(json.dumps({"type": "exited", "id": self.frame_id,  # type: ignore[attr-defined]
                                       "allocation": self.alloc, "exit_code": 0, "reason": "completed"}))
        return t0


async def scenario(port: int, data: dict, reports: int) -> dict[str, object]:
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

    out: dict[str, object] = {}
    plain: list[float] = []
    acks: list[float] = []
    for probe in probes[:reports]:
        t0 = await probe.exit()
        got = await ops.wait_for(f"{probe.alloc}:completed")
        if got is None:
            out.setdefault("lost", 0)
            out["lost"] = int(out["lost"]) + 1  # type: ignore[call-overload]
        else:
            plain += [t - t0 for t in got]
            acks.append(probe.acked_at - t0)
        await asyncio.sleep(0.05)
    out["plain"] = plain
    out["acks"] = acks

    decided: list[float] = []
    placed: set[str] = set()
    for probe in probes[reports:]:
        t0 = await probe.exit()
        end = time.perf_counter() + 10
        winner = None
        while winner is None and time.perf_counter() < end:
            for alloc in data["waiting"] - placed:
                if all(f"{alloc}:running" in seen for seen in ops.arrivals):
                    winner = alloc
                    break
            await asyncio.sleep(0.001)
        if winner is not None:
            placed.add(winner)
            decided += [seen[f"{winner}:running"] - t0 for seen in ops.arrivals]
        await asyncio.sleep(0.05)
    out["decision"] = decided

    frames0, events0 = list(ops.frames), list(ops.events)
    await burst()
    await asyncio.sleep(1.0)
    out["burst_frames"] = [f - f0 for f, f0 in zip(ops.frames, frames0, strict=True)]
    out["burst_events"] = [e - e0 for e, e0 in zip(ops.events, events0, strict=True)]
    stop.set()
    for task in tasks:
        task.cancel()
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=500, help="background agents heartbeating every 5 s")
    parser.add_argument("--reports", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.reports = 100, 30
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url.startswith("redis://"):
        sys.stderr.write("bench/live.py needs REDIS_URL\n")
        sys.exit(2)
    url = bench_database("_live_bench", "bench/live.py")
    redis_url = urlunparse(urlparse(redis_url)._replace(path=f"/{REDIS_DB}"))
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    env = use_bench_settings(url, redis_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    data = prepare(args.agents, args.reports)
    port = free_port()
    worker_env = {**env, "DB_STATEMENT_TIMEOUT_MS": "60000"}  # as the worker is started in production
    procs = [subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "lattice_site.asgi:application"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([sys.executable, "-m", "celery", "-A", "lattice_site", "worker", "--pool=threads", "--concurrency=4",
                               "--loglevel=ERROR"], cwd=ROOT, env=worker_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    try:
        for _ in range(150):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        time.sleep(3)  # the worker connects to the broker
        from scheduling.passes.run import schedule_pass

        schedule_pass(data["group"])  # the waiting requests get their first (NO_CAPACITY) decisions
        out = asyncio.run(scenario(port, data, args.reports))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()
    plain, decided = out["plain"], out["decision"]
    print(f"{args.agents} background agents at 1 heartbeat/5 s, {OPERATORS} operator sockets, "
          f"{args.reports} reports per case")
    print(f"plain state change: p50 {pct(plain, 0.5) * 1e3:.1f} ms, p99 {pct(plain, 0.99) * 1e3:.1f} ms "
          f"(goal 50 ms), {len(plain)} arrivals")
    print(f"  (the report's ack, after its commit: p50 {pct(out['acks'], 0.5) * 1e3:.1f} ms, "
          f"p99 {pct(out['acks'], 0.99) * 1e3:.1f} ms)")
    print(f"report -> decision -> placed: p50 {pct(decided, 0.5) * 1e3:.1f} ms, "
          f"p99 {pct(decided, 0.99) * 1e3:.1f} ms (goal 100 ms), {len(decided)} arrivals")
    if out.get("lost"):
        print(f"  {out['lost']} plain events never arrived at every socket")
    print(f"burst of 200 events: {max(out['burst_frames'])} frames per socket at most "
          f"({min(out['burst_events'])} events each)")


if __name__ == "__main__":
    main()
