"""Submissions through the REST API, for bench/scheduler.py: the whole path a tenant's request takes
to be stored (HTTP, authentication, validation, the quota row locked, the insert, its event and
the pass asked for), from 4 clients of mixed tenants. Slurm's 500 jobs/s is the anchor.

The servers run with REDIS_URL's broker and no worker, so the pass each submission asks for is
queued, not run: the figure is the submission path alone (the bench deletes the keys it made).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import time
from typing import Any

from bench.api import start_servers
from bench.common import Meter, forget_new_keys, pct, redis_keys

CLIENTS = 4
ANCHOR = 500.0  # jobs/s (Slurm's documented submission rate)
GOAL_CPU_S = 1 / ANCHOR  # the servers' CPU per submission at which one core serves the anchor


def client_loop(port: int, tokens: list[str], seconds: float, start: float, out: Any) -> None:
    """Closed loop, each request as a different tenant in turn (the tenants mixed over the clients)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"resource_group": "bench", "vcluster": "free", "per_node": {"gpu": 1}, "command": ["true"],
                       "name": "submitted"})
    lat: list[float] = []
    errors: list[str] = []
    while time.time() < start:
        time.sleep(0.001)
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        conn.request("POST", "/api/v1/allocations/", body=body,
                     headers={"Authorization": f"Token {tokens[k % len(tokens)]}", "Content-Type": "application/json",
                              "Host": "127.0.0.1"})
        response = conn.getresponse()
        answer = response.read()
        lat.append(time.perf_counter() - t0)
        if response.status != 201:
            errors.append(f"{response.status} {answer[:200]!r}")
        k += 1
    out.put((lat, errors))


def run(env: dict[str, str], tokens: list[str], seconds: float, repeats: int) -> dict[str, list[float]]:
    """Per repeat: submissions per second, p50, p99, and the servers' CPU per submission."""
    before = redis_keys(env["REDIS_URL"])
    servers, ports = start_servers(env, 2)
    got: dict[str, list[float]] = {"rate": [], "p50": [], "p99": [], "cpu": [], "samples": []}
    try:
        spawn = multiprocessing.get_context("spawn")
        for _ in range(repeats):
            out = spawn.Queue()
            start = time.time() + 3.0
            procs = [spawn.Process(target=client_loop, args=(ports[i % len(ports)], tokens[i::CLIENTS] or tokens,
                                                             seconds, start, out)) for i in range(CLIENTS)]
            for proc in procs:
                proc.start()
            time.sleep(max(0.0, start - time.time()))
            meter = Meter(*(s.pid for s in servers)).start()
            lat: list[float] = []
            errors: list[str] = []
            for _ in procs:
                got_lat, got_errors = out.get(timeout=seconds + 60)
                lat += got_lat
                errors += got_errors
            meter.stop()
            for proc in procs:
                proc.join()
            if errors:
                print(f"  {len(errors)} submissions refused, e.g. {errors[0]}")
            got["rate"].append(len(lat) / seconds)
            got["p50"].append(pct(lat, 0.5))
            got["p99"].append(pct(lat, 0.99))
            got["cpu"].append(meter.cpu / max(1, len(lat)))
            got["samples"].append(len(lat))
            print(f"submissions: {len(lat) / seconds:,.0f}/s from {CLIENTS} clients, p50 {pct(lat, 0.5) * 1e3:.1f} ms, "
                  f"p99 {pct(lat, 0.99) * 1e3:.1f} ms; servers' CPU {meter.cpu / max(1, len(lat)) * 1e3:.2f} ms "
                  f"per submission ({meter.busy:.0%} of a core)")
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait()
        forget_new_keys(env["REDIS_URL"], before)
    return got
