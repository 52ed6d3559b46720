"""Agent WebSocket benchmark: acknowledged frames per second, ack latency, server cost.

    DATABASE_URL=postgres://.../lattice python bench/agents.py [--agents 2000] [--quick]

Starts Daphne pinned to one core (the load generator is pinned to the other), on
its own database (the URL's name + "_agents_bench"). Cases: N agents sending one
heartbeat every 5 s (ack p99, and when the heartbeat is visible in the database,
polled from outside every 5 ms); M agents at 4 heartbeats per second (frames per
second sustained, ack p99); every agent reconnecting, with the agent program's
backoff and jitter, to a server started again after they lost it. In the same run, a trivial echo consumer on
the same server gives the ceiling that frames per second are compared against, and under the N
agents' own load (1 frame/5 s, open loop) what a frame costs the server before Lattice's work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARMUP_S = 3.0
GPUS = 8  # per node: each hello lists their devices, each heartbeat their health (--gpus)
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    CPU_BOUND,
    Meter,
    bench_database,
    enough_for,
    free_port,
    pct,
    print_table,
    repeats_text,
    use_bench_settings,
    verdict,
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_server(app: str, port: int, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p",
                             str(port), "--websocket_timeout", "-1", "--websocket_connect_timeout", "30", app],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(150):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    raise SystemExit("the server did not start")


class Visibility:
    """When a heartbeat becomes visible in the database, seen from outside the server: a thread
    polls ``last_seq`` of a few watched nodes every 5 ms (so figures carry up to 5 ms of polling)."""

    POLL_S = 0.005

    def __init__(self, db_url: str, node_ids: list[int]) -> None:
        self.db_url, self.watched = db_url, set(node_ids)
        self.sent: dict[int, list[tuple[int, float]]] = {n: [] for n in node_ids}
        self.delays: list[float] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def record(self, node_id: int, seq: int, at: float) -> None:
        if node_id in self.watched:
            with self.lock:
                self.sent[node_id].append((seq, at))

    def _poll(self) -> None:
        import psycopg

        with psycopg.connect(self.db_url, autocommit=True) as conn:
            ids = sorted(self.watched)
            while not self.stop.is_set():
                rows = conn.execute("SELECT id, last_seq FROM nodes_node WHERE id = ANY(%s)", [ids]).fetchall()
                now = time.perf_counter()
                with self.lock:
                    for node_id, last in rows:
                        pending = self.sent[node_id]
                        while pending and last is not None and pending[0][0] <= last:
                            self.delays.append(now - pending.pop(0)[1])
                time.sleep(self.POLL_S)


def hello_frame(frame_id: str) -> str:
    """A hello as an agent on a GPU node sends it: its devices (index, UUID, model, memory)."""
    devices = [{"index": i, "uuid": f"GPU-{uuid.UUID(int=i)}", "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
                "healthy": True} for i in range(GPUS)]
    return json.dumps({"type": "hello", "id": frame_id, "agent_version": "bench", "capacity": {}, "labels": {},
                       "running": [], **({"devices": devices} if GPUS else {})})


def heartbeat_frame(frame_id: str, seq: int) -> str:
    """A heartbeat as an agent on a GPU node sends it: each GPU's health, temperatures moving."""
    gpus = [{"index": i, "temperature_c": random.randint(55, 70), "ecc_uncorrectable": 0, "retired_pending": False}
            for i in range(GPUS)]
    return json.dumps({"type": "heartbeat", "id": frame_id, "seq": seq, "running": [],
                       **({"gpus": gpus} if GPUS else {})})


async def connect(url: str, token: str, hello: bool) -> Any:
    """One agent's connection, with its hello acknowledged."""
    import websockets

    ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                  max_size=2**16, open_timeout=60)
    if hello:
        await ws.send(hello_frame("h"))
        while json.loads(await ws.recv()).get("type") != "ack":
            pass
    return ws


async def agent(ws: Any, rate: float, seconds: float, lat: list[float], acks: list[int], node_id: int = 0,
                seen: Visibility | None = None) -> None:
    """Heartbeats at ``rate`` per second on a connection made before any agent started sending, so
    the figures are the steady state (the connect burst is measured by the reconnect case)."""
    sent: dict[str, float] = {}
    warm_until = time.perf_counter() + WARMUP_S

    async def reader() -> None:
        async for text in ws:
            frame = json.loads(text)
            t0 = sent.pop(frame.get("id", ""), None)
            if t0 is not None and t0 >= warm_until:
                lat.append(time.perf_counter() - t0)
                acks[0] += 1

    task = asyncio.create_task(reader())
    end = time.perf_counter() + seconds
    # Open loop on a fixed schedule (the k-th frame is due at first + k / rate, the first within
    # one period, spread out over the agents): sleeping a period after each send would offer a
    # little less than the rate.
    due = time.perf_counter() + (random.random() - 1) / rate
    while (due := due + 1 / rate) < end:
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        frame_id = uuid.uuid4().hex
        sent[frame_id] = time.perf_counter()
        seq = time.time_ns() // 1000
        if seen is not None and sent[frame_id] >= warm_until:
            seen.record(node_id, seq, sent[frame_id])
        await ws.send(heartbeat_frame(frame_id, seq))
    await asyncio.sleep(1.0)
    task.cancel()
    await ws.close()


async def echo_client(url: str, seconds: float, counts: list[int]) -> None:
    """Closed loop: the next frame goes when the previous one came back (no backlog builds up)."""
    import websockets

    async with websockets.connect(url, max_size=2**16, open_timeout=60) as ws:
        await asyncio.sleep(WARMUP_S / 10)
        end = time.perf_counter() + seconds
        frame = heartbeat_frame("x", 1)
        while time.perf_counter() < end:
            await ws.send(frame)
            await ws.recv()
            counts[0] += 1


async def heartbeat_client(url: str, token: str, seconds: float, counts: list[int]) -> None:
    """Closed loop on the real consumer, as ``echo_client`` on the echo one: the next heartbeat
    goes when the previous one is acknowledged (each written to the database first)."""
    ws = await connect(url, token, hello=True)
    await asyncio.sleep(WARMUP_S / 10)
    end = time.perf_counter() + seconds
    seq = time.time_ns() // 1000
    while time.perf_counter() < end:
        seq += 1
        await ws.send(heartbeat_frame("c", seq))
        if json.loads(await ws.recv()).get("type") != "ack":
            raise RuntimeError("a heartbeat of the closed loop was refused")
        counts[0] += 1
    await ws.close()


async def heartbeat_ceiling(url: str, tokens: list[str], seconds: float) -> float:
    counts = [0]
    start = time.perf_counter()
    done = await asyncio.gather(*(heartbeat_client(url, t, seconds, counts) for t in tokens), return_exceptions=True)
    failed = [d for d in done if isinstance(d, BaseException)]
    if failed:
        print(f"  {len(failed)} of {len(tokens)} closed-loop agents failed, e.g. {failed[0]!r}")
    return counts[0] / (time.perf_counter() - start)


async def echo_ceiling(url: str, connections: int, seconds: float) -> float:
    counts = [0]
    start = time.perf_counter()
    await asyncio.gather(*(echo_client(url, seconds, counts) for _ in range(connections)), return_exceptions=True)
    return counts[0] / (time.perf_counter() - start)


async def run_load(url: str, tokens: list[str], rate: float, seconds: float, meter: Meter, hello: bool = True,
                   node_ids: list[int] | None = None, seen: Visibility | None = None
                   ) -> tuple[float, list[float], int]:
    """Returns (acks per second, ack latencies, acks) of the frames sent after the warm-up; the
    meter runs over the same window (from the warm-up's end to the last frame's due time)."""
    lat: list[float] = []
    acks = [0]
    ids = node_ids or [0] * len(tokens)
    conns = await asyncio.gather(*(connect(url, t, hello) for t in tokens), return_exceptions=True)
    failures = [c for c in conns if isinstance(c, BaseException)]
    if failures:
        print(f"  {len(failures)} of {len(tokens)} connections failed, e.g. {failures[0]!r}")
    loop = asyncio.get_running_loop()
    loop.call_later(WARMUP_S, meter.start)
    loop.call_later(seconds, meter.stop)
    await asyncio.gather(*(agent(ws, rate, seconds, lat, acks, n, seen)
                           for ws, n in zip(conns, ids, strict=True) if not isinstance(ws, BaseException)))
    elapsed = seconds - WARMUP_S  # each agent counts acks of the frames it sends in this window
    return acks[0] / elapsed, lat, acks[0]


async def live_agent(url: str, token: str, connected: list[int], lost: asyncio.Event,
                     back: list[float]) -> None:
    """An agent connected (its hello acknowledged) until the server drops it, then as the agent
    program after losing its server: back off with jitter (1 s doubling, capped at 30 s) until a
    hello is acknowledged again."""
    import websockets

    try:
        ws = await connect(url, token, hello=True)
    except Exception:
        return
    connected[0] += 1
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass
    lost.set()
    backoff = 1.0
    await asyncio.sleep(min(30.0, backoff) * (0.5 + random.random() / 2))
    while True:
        try:
            async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                          open_timeout=30) as ws:
                await ws.send(hello_frame(uuid.uuid4().hex))
                while json.loads(await ws.recv()).get("type") != "ack":
                    pass
                back.append(time.perf_counter())
                return
        except Exception:
            await asyncio.sleep(min(30.0, backoff) * (0.5 + random.random() / 2))
            backoff = min(30.0, backoff * 2)


def prepare(count: int) -> tuple[str, dict[str, str], list, list[str]]:
    url = bench_database("_agents_bench", "bench/agents.py")
    env = use_bench_settings(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from nodes.actions import agent_token_issue
    from nodes.models import Node
    from scheduling.models import ResourceGroup

    group = ResourceGroup.objects.create(name="bench", policy={"kind": "class_cost"})
    # Nodes of a running cluster: their GPUs' health stored by earlier heartbeats (a node's first
    # report is judged in full once, which is not the steady state measured here).
    health = [{"index": i, "temperature_c": 60, "ecc_uncorrectable": 0, "retired_pending": False} for i in range(GPUS)]
    nodes = Node.objects.bulk_create([Node(name=f"a{i:05d}", resource_group=group, gpu=8, state="ready",
                                           gpu_health=health) for i in range(count)])
    print(f"{count:,} nodes with agent tokens")
    return url, env, nodes, [agent_token_issue(node=n) for n in nodes]


def echo_case(ws_url: str, port: int, env: dict[str, str], connections: int, seconds: float,
              slow: tuple[list[str], int]) -> tuple[float, Meter, list[float]]:
    """The echo ceiling (closed loop) and the echo server's meter over it; then, per repeat, the
    echo server's CPU per frame under the slow case's own load (``slow``: the agents' tokens, the
    repeats), open loop at 1/5 s: what the server and Channels cost a frame at that rate before
    Lattice does anything with it."""
    echo = start_server("bench.echo_asgi:application", port, env)
    slow_cpu: list[float] = []
    try:
        meter = Meter(echo.pid).start()
        rate = asyncio.run(echo_ceiling(ws_url, connections, seconds))
        meter.stop()
        for _ in range(slow[1]):
            at_rate = Meter(echo.pid)
            _, _, n = asyncio.run(run_load(ws_url, slow[0], 0.2, seconds, at_rate, hello=False))
            slow_cpu.append(at_rate.cpu / max(n, 1))
    finally:
        echo.terminate()
        echo.wait()
    print(f"echo ceiling: {rate:,.0f} frames/s ({connections} connections, closed loop; server "
          f"{meter.busy:.0%} of its core, {meter.cpu / max(1.0, rate * meter.wall) * 1e3:.3f} ms CPU/frame)")
    print(f"echo at the slow case's load ({len(slow[0]):,} connections at 1 frame/5 s, open loop): server CPU "
          f"{repeats_text(slow_cpu, 1e3, ' ms/frame', 3)}")
    return rate, meter, slow_cpu


def steady_cases(args: argparse.Namespace, url: str, ws_url: str, server: subprocess.Popen, nodes: list,
                 tokens: list[str]) -> dict[str, list[float]]:
    """Per repeat: the slow case (N agents at 1/5 s: ack p99, visibility p99, CPU per frame) and the
    fast one (M agents at 4/s)."""
    got: dict[str, list[float]] = {k: [] for k in ("p99", "cpu", "seen", "fast_rate", "fast_p99", "fast_cpu")}
    samples = {"p99": 0, "seen": 0}
    node_ids = [n.pk for n in nodes[: args.agents]]
    for _ in range(args.repeats):
        base_rss = rss_mb(server.pid)
        seen = Visibility(url, node_ids[:: max(1, len(node_ids) // 400)])
        seen.thread.start()
        meter = Meter(server.pid)
        rate, lat, n = asyncio.run(run_load(ws_url, tokens[: args.agents], 0.2, args.seconds, meter,
                                            node_ids=node_ids, seen=seen))
        seen.stop.set()
        seen.thread.join()
        got["p99"].append(pct(lat, 0.99))
        got["cpu"].append(meter.cpu / max(n, 1))
        got["seen"].append(pct(seen.delays, 0.99))
        samples["p99"], samples["seen"] = len(lat), len(seen.delays)
        print(f"{args.agents:,} agents at 1 heartbeat/5 s: {rate:,.0f} acks/s, ack p50 {pct(lat, 0.5) * 1e3:.1f} ms, "
              f"p99 {pct(lat, 0.99) * 1e3:.1f} ms ({len(lat):,} samples); server CPU "
              f"{meter.cpu / max(n, 1) * 1e3:.3f} ms/frame ({meter.busy:.0%} of its core); memory "
              f"{(rss_mb(server.pid) - base_rss) * 1024 / args.agents:.0f} KiB/connection")
        print(f"  heartbeat visible in the database ({len(seen.delays)} samples on {len(seen.watched)} nodes): "
              f"p50 {pct(seen.delays, 0.5) * 1e3:.1f} ms, p99 {pct(seen.delays, 0.99) * 1e3:.1f} ms")
        meter = Meter(server.pid)
        rate, lat, n = asyncio.run(run_load(ws_url, tokens[: args.fast_agents], 4, args.seconds, meter))
        got["fast_rate"].append(rate)
        got["fast_p99"].append(pct(lat, 0.99))
        got["fast_cpu"].append(meter.cpu / max(n, 1))
        print(f"{args.fast_agents:,} agents at 4 heartbeats/s: {rate:,.0f} frames/s, ack p99 "
              f"{pct(lat, 0.99) * 1e3:.1f} ms, server CPU {meter.cpu / max(n, 1) * 1e3:.3f} ms/frame "
              f"({meter.busy:.0%} of its core)")
    got["samples_p99"] = [float(samples["p99"])]
    got["samples_seen"] = [float(samples["seen"])]
    return got


def main() -> None:
    global GPUS, WARMUP_S
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--fast-agents", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=GPUS, help="GPUs per node in each hello and heartbeat")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    GPUS = args.gpus
    if args.quick:
        WARMUP_S = 1.0
        # (200 closed-loop agents: fewer would each pass the agents' frame rate limit and be closed)
        args.agents, args.fast_agents, args.seconds, args.repeats = 100, 200, 3, 1
    os.sched_setaffinity(0, {1})
    url, env, nodes, tokens = prepare(max(args.agents, args.fast_agents))
    port = free_port()
    ws_url = f"ws://127.0.0.1:{port}/ws/agent/"
    rate_echo, echo, echo_slow = echo_case(ws_url, port, env, args.fast_agents, args.seconds,
                                           (tokens[: args.agents], args.repeats))

    server = start_server("lattice_site.asgi:application", port, env)
    try:
        got = steady_cases(args, url, ws_url, server, nodes, tokens)
        # The fast case offers a fixed rate, so its rate says nothing of the consumer's ceiling;
        # measured as the echo ceiling is, the two compare.
        meter = Meter(server.pid).start()
        ceiling = asyncio.run(heartbeat_ceiling(ws_url, tokens[: args.fast_agents], args.seconds))
        meter.stop()
        print(f"heartbeat ceiling: {ceiling:,.0f} frames/s ({args.fast_agents} agents, closed loop, each "
              f"written before its ack; server {meter.busy:.0%} of its core)")
    finally:
        server.terminate()
        server.wait()
    back, live, last = restart(ws_url, port, env, tokens[: args.agents])
    print(f"restart: {back:,} of {live:,} live connections dropped by a server restart were back "
          f"{last:.1f} s after the server was up")

    echo_cpu = echo.cpu / max(1.0, rate_echo * echo.wall)
    hb_cpu = meter.cpu / max(1.0, ceiling * meter.wall)
    ceilings_valid = echo.busy >= CPU_BOUND and meter.busy >= CPU_BOUND
    if not ceilings_valid:
        print(f"  the ceilings' ratio is not valid: echo server {echo.busy:.0%}, heartbeat server "
              f"{meter.busy:.0%} of its core (both must be at least {CPU_BOUND:.0%}: CPU-bound)")
    p99_ok = enough_for([0.0] * int(got["samples_p99"][0]), 0.99)
    seen_ok = enough_for([0.0] * int(got["samples_seen"][0]), 0.99)
    print_table(f"agents (CPU time of the Daphne process; {args.repeats} repeats: min / median)", [
        (f"{args.agents:,} agents at 1/5 s: ack p99 <= 25 ms", repeats_text(got["cpu"], 1e3, " ms/frame", 3),
         repeats_text(got["p99"], 1e3, " ms", 1), verdict(sorted(got["p99"])[len(got["p99"]) // 2] <= 0.025, p99_ok)),
        ("server CPU per heartbeat frame <= 0.12 ms", f"{repeats_text(got['cpu'], 1e3, ' ms', 3)}; the echo "
         f"consumer at this load: {repeats_text(echo_slow, 1e3, ' ms', 3)}", "",
         verdict(min(got["cpu"]) <= 0.12e-3 and sorted(got["cpu"])[len(got["cpu"]) // 2] <= 0.12e-3)),
        (f"{args.agents:,} agents at 1/5 s use under a quarter of a core",
         repeats_text([c * args.agents / 5 for c in got["cpu"]], 100, " % of a core", 1), "",
         verdict(sorted(got["cpu"])[len(got["cpu"]) // 2] * args.agents / 5 < 0.25)),
        ("heartbeat visible in the database: p99 <= 250 ms", "", repeats_text(got["seen"], 1e3, " ms", 1),
         verdict(sorted(got["seen"])[len(got["seen"]) // 2] <= 0.25, seen_ok)),
        (f"{args.fast_agents:,} agents at 4/s: {args.fast_agents * 4:,} frames/s, ack p99 <= 100 ms",
         repeats_text(got["fast_cpu"], 1e3, " ms/frame", 3),
         f"{repeats_text(got['fast_rate'], 1, '/s', 0)}; p99 {repeats_text(got['fast_p99'], 1e3, ' ms', 1)}",
         verdict(sorted(got["fast_p99"])[len(got["fast_p99"]) // 2] <= 0.1
                 and min(got["fast_rate"]) >= 0.95 * args.fast_agents * 4)),
        ("heartbeat ceiling >= 0.5x the echo ceiling", f"{echo_cpu / hb_cpu:.2f}x (echo {echo_cpu * 1e3:.3f}, "
         f"heartbeat {hb_cpu * 1e3:.3f} ms/frame)", f"{ceiling / rate_echo:.2f}x",
         verdict(echo_cpu / hb_cpu >= 0.5, ceilings_valid)),
        (f"all {live:,} live connections back within 30 s of a restart", "", f"{last:.1f} s",
         verdict(back == live == args.agents and last <= 30)),
    ])


def restart(ws_url: str, port: int, env: dict[str, str], tokens: list[str]) -> tuple[int, int, float]:
    """Every agent connected to a running server, the server stopped (its connections dropped) and
    started again: (agents back, agents that were connected, seconds from up to the last back)."""
    async def storm() -> tuple[list[float], int, float]:
        server = await asyncio.to_thread(start_server, "lattice_site.asgi:application", port, env)
        back: list[float] = []
        connected = [0]
        lost = asyncio.Event()
        tasks = [asyncio.create_task(live_agent(ws_url, t, connected, lost, back)) for t in tokens]
        deadline = time.perf_counter() + 120
        while connected[0] < len(tokens) and time.perf_counter() < deadline and not all(t.done() for t in tasks):
            await asyncio.sleep(0.1)
        server.terminate()  # every live connection dropped
        await asyncio.to_thread(server.wait)
        if connected[0]:
            await lost.wait()
        server = await asyncio.to_thread(start_server, "lattice_site.asgi:application", port, env)
        up = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        except TimeoutError:
            pass
        finally:
            server.terminate()
            await asyncio.to_thread(server.wait)
        return back, connected[0], up

    back, live, up = asyncio.run(storm())
    times = [t - up for t in back]
    return len(back), live, max(times) if times else float("nan")


if __name__ == "__main__":
    main()
