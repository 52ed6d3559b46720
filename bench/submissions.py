"""Submissions through the REST API, for bench/scheduler.py: the whole path a tenant's request takes
to be stored (HTTP, authentication, validation, the quota row locked, the insert, its event and
the pass asked for), from 4 clients of mixed tenants. Slurm's 500 jobs/s is the anchor.

The servers run with REDIS_URL's broker and no worker, so the pass each submission asks for is
queued, not run: the figure is the submission path alone (the bench deletes the keys it made).
Alone, on a group of its own (``--nodes``, 10,000 by default; ``--quick``: 500):

    DATABASE_URL=postgres://... REDIS_URL=redis://... python bench/submissions.py
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.api import start_servers  # noqa: E402
from bench.common import (  # noqa: E402
    Meter,
    bench_database,
    forget_new_keys,
    pct,
    print_table,
    redis_keys,
    repeats_text,
    verdict,
)
from bench.scheduler_setup import seed, setup_django  # noqa: E402

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


def main() -> None:
    """The submission case alone (bench/scheduler.py runs it after its passes)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.seconds, args.repeats = 500, 2, 1
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url.startswith("redis://"):
        sys.stderr.write("bench/submissions.py needs REDIS_URL (the servers queue each pass there)\n")
        sys.exit(2)
    setup_django(bench_database("_submissions_bench", "bench/submissions.py"))
    ctx = seed(args.nodes, args.nodes * 4)
    print(f"seeded {args.nodes:,} nodes and {args.nodes * 4:,} running allocations")
    got = run({**os.environ, "REDIS_URL": redis_url}, ctx["tokens"], args.seconds, args.repeats)
    print_table(f"submissions (CPU time of the API servers; {args.repeats} repeats: min / median)", [
        (f"{ANCHOR:,.0f} submissions/s (Slurm's rate; <= 2 ms of the servers' CPU each)",
         repeats_text(got["cpu"], 1e3, " ms", 2) + " per submission",
         f"{repeats_text(got['rate'], 1, '/s', 0)}; p99 {repeats_text(got['p99'], 1e3, ' ms', 1)}",
         verdict(sorted(got["cpu"])[len(got["cpu"]) // 2] <= GOAL_CPU_S))])


if __name__ == "__main__":
    main()
