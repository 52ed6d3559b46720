"""Faults in a running system: kill the Celery worker and one of two Daphne servers mid-run.

Real processes on loopback: two Daphne servers on the same PostgreSQL and Redis, a Celery
worker (a thread pool, as deployed) and Celery beat running the sweeps every 2 s, and four
simulated agents (the real agent program, ``--simulate``), two connected to each server.
Two tenants submit over REST: low-class work fills the nodes, high-class work preempts it,
an operator drains a node. As soon as a victim is checkpointing, the worker and server B
are SIGKILLed; the worker comes back at once, B after more than 30 s (long enough for its
agents' nodes to be found silent), during which B's agents finish work and checkpoints they
cannot report and A takes more submissions. Then everything settles (bounded), a sweep runs,
and every invariant of ``scheduling.invariants`` must hold.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from nodes.actions import agent_token_issue
from nodes.models import Node, ProcessedFrame
from scheduling import invariants
from scheduling.actions.lifecycle import sweep
from scheduling.actions.tokens import api_token_issue
from scheduling.models import (
    Allocation,
    AllocationEvent,
    Membership,
    Quota,
    ResourceGroup,
    Tenant,
    VCluster,
)
from tests.conftest import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SIM_LONG_S = 60.0  # work on server A's agents outlives the test's run
SIM_SHORT_S = 20.0  # work on server B's agents ends while B is down
DOWN_S = 36.0  # B's agents silent for more than 30 s: their nodes are found degraded
CHECKPOINT_TIMEOUT_MIN = 0.25  # 15 s: a checkpoint that cannot be reported times out while B is down
BACKOFF_CAP_S = 3.0
SETTLE_S = 60.0
REPORTS_S = 30.0
NODES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Services:
    """The processes of the run, each logging to its own file, killed at the end whatever happened."""

    def __init__(self, tmp: Path) -> None:
        db = connection.settings_dict
        self.tmp = tmp
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.test", "LOG_LEVEL": "WARNING",
                    "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
                                    f"/{db['NAME']}", "ALLOWED_HOSTS": "127.0.0.1,localhost",
                    "LATTICE_SWEEP_SECONDS": "2", "LATTICE_VAR_DIR": str(tmp / "var")}
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports = {"a": _free_port(), "b": _free_port()}

    def start(self, name: str, argv: list[str], **env: str) -> None:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (the process owns it)
        self.procs[name] = subprocess.Popen(argv, cwd=ROOT, env={**self.env, **env}, stdout=log,
                                            stderr=subprocess.STDOUT)

    def daphne(self, name: str) -> None:
        self.start(f"daphne-{name}", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.ports[name]),
                                      "--websocket_timeout", "-1", "lattice_site.asgi:application"])

    def worker(self) -> None:
        self.start("worker", [sys.executable, "-m", "celery", "-A", "lattice_site", "worker", "--pool=threads",
                              "--concurrency=4", "--loglevel=INFO", "--without-gossip", "--without-mingle",
                              "--without-heartbeat", "-n", f"faults-{uuid.uuid4().hex[:8]}@127.0.0.1"],
                   DB_STATEMENT_TIMEOUT_MS="60000")

    def evaluator(self) -> None:
        """The Procfile's ``evaluator``: the evaluations queue only, one forked child."""
        self.start("evaluator", [sys.executable, "-m", "celery", "-A", "lattice_site", "worker", "-Q", "evaluations",
                                 "--pool=prefork", "--concurrency=1", "--loglevel=INFO", "--without-gossip",
                                 "--without-mingle", "--without-heartbeat", "-n",
                                 f"evaluator-{uuid.uuid4().hex[:8]}@127.0.0.1"], DB_STATEMENT_TIMEOUT_MS="60000")

    def beat(self) -> None:
        self.start("beat", [sys.executable, "-m", "celery", "-A", "lattice_site", "beat", "--loglevel=WARNING",
                            "--schedule", str(self.tmp / "beat-schedule")])

    def agent(self, node: str, token: str) -> None:
        server = NODES[node]
        (self.tmp / f"{node}.token").write_text(token)
        self.start(f"agent-{node}", [
            sys.executable, "-m", "tests.system.recording_agent", str(self.tmp / "exits.jsonl"), str(BACKOFF_CAP_S),
            "--", "--url", f"ws://127.0.0.1:{self.ports[server]}/ws/agent/", "--token-file",
            str(self.tmp / f"{node}.token"), "--workdir", str(self.tmp / node), "--simulate", "--sim-seconds",
            str(SIM_SHORT_S if server == "b" else SIM_LONG_S), "--log-level", "WARNING"])

    def kill(self, name: str) -> None:
        """As a crash: SIGKILL, no cleanup."""
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def worker_ready(self, name: str = "worker") -> bool:
        return b"ready." in (self.tmp / f"{name}.log").read_bytes()

    def exit_frames(self) -> set[str]:
        """The ids of the exit reports the agents made."""
        path = self.tmp / "exits.jsonl"
        return {json.loads(line)["id"] for line in (path.read_text().splitlines() if path.exists() else [])}

    def exits(self) -> dict[int, list[tuple[int | None, str]]]:
        out: dict[int, list[tuple[int | None, str]]] = {}
        path = self.tmp / "exits.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            entry = json.loads(line)
            out.setdefault(int(entry["allocation"]), []).append((entry["exit_code"], entry["reason"]))
        return out

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-1500:]
                         for p in sorted(self.tmp.glob("*.log")))

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        time.sleep(0.5)  # let PostgreSQL see the sessions gone before the test database is flushed


@pytest.fixture
def services(tmp_path):
    running = Services(tmp_path)
    yield running
    running.stop_all()


def wait_for(check, timeout: float, what: str, services: Services | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{services.tails() if services else ''}")


def _cluster() -> dict[str, Any]:
    """A small demo: one group (checkpoints time out after 15 s), four 8-GPU nodes, two tenants
    with API tokens, an operator with one."""
    group = ResourceGroup.objects.create(name="rg-faults", policy={
        "kind": "class_cost", "mode": "suspend", "checkpoint_timeout_minutes": CHECKPOINT_TIMEOUT_MIN})
    hpc = VCluster.objects.create(resource_group=group, name="hpc", type="hpc_batch")
    User = get_user_model()
    tokens = {"operator": api_token_issue(user=User.objects.create_user("fault-op", is_staff=True))}
    for tenant_name, user in (("physics", "alice"), ("chemistry", "bob")):
        tenant = Tenant.objects.create(name=tenant_name)
        Quota.objects.create(tenant=tenant, max_nodes=8, max_gpus=64, max_concurrent_allocations=8, fair_share=0.5)
        member = User.objects.create_user(user)
        Membership.objects.create(user=member, tenant=tenant)
        tokens[user] = api_token_issue(user=member)
    for name in NODES:
        Node.objects.create(name=name, resource_group=group, vcluster=hpc, gpu=8, cpu=64, memory=512, state="ready")
    return tokens


def _call(port: int, token: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/{path}", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _submit(port: int, token: str, klass: int, accepted: list[int]) -> None:
    status, body = _call(port, token, "allocations/", {
        "resource_group": "rg-faults", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8, "cpu": 8, "memory": 64},
        "preemption_class": klass, "checkpoint": "auto", "command": ["simulated"]})
    assert status in (201, 409), (status, body)  # 409: a hard quota, which the run also exercises
    if status == 201:
        accepted.append(int(body["id"]))


def _b_heard_since_starts() -> bool:
    for node in Node.objects.filter(name__in=[n for n, server in NODES.items() if server == "b"]):
        started = Allocation.objects.filter(state="running", placements__node=node).values_list("started_at", flat=True)
        if not started or node.last_heartbeat_at is None or node.last_heartbeat_at <= max(started):
            return False
    return True


def _applied(frames, timeout: float) -> bool:
    """Whether every frame id ``frames()`` names was recorded as applied before ``timeout`` passed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        wanted = frames()
        if len(set(ProcessedFrame.objects.filter(frame_id__in=wanted).values_list("frame_id", flat=True))) == \
                len(wanted):
            return True
        time.sleep(0.2)
    return False


def _leaving() -> int:
    return Allocation.objects.filter(state__in=["checkpointing", "terminating"]).count()


def _settled(since) -> bool:
    """Every agent is back (heard from since B restarted) and no victim is still leaving before
    its deadline (one past it is the sweep's to end)."""
    heard = Node.objects.filter(last_heartbeat_at__gt=since).count() == len(NODES)
    leaving = Allocation.objects.filter(state__in=["checkpointing", "terminating"], deadline_at__gt=timezone.now())
    return heard and not leaving.exists()


def _report(results: dict[str, list[str]], timeline: list[str]) -> str:
    lines = ["invariants violated after the faults:"]
    for name in invariants.violated(results):
        lines.append(f"  {name}:")
        lines += [f"    - {v}" for v in results[name]]
    lines += ["timeline:"] + [f"  {t}" for t in timeline]
    named = sorted({int(pk) for found in results.values() for v in found for pk in re.findall(r"#(\d+)", v)})
    lines.append("history of the allocations named:")
    for event in AllocationEvent.objects.filter(allocation_id__in=named).order_by("allocation_id", "created_at", "id"):
        lines.append(f"  #{event.allocation_id} {event.created_at:%H:%M:%S.%f} {event.from_state or '-'} -> "
                     f"{event.to_state}: {event.reason}")
    return "\n".join(lines)


def test_killing_the_worker_and_a_server_mid_run_breaks_no_invariant(services):
    tokens = _cluster()
    started = time.monotonic()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - started:6.1f}s {what}")

    for name in ("a", "b"):
        services.daphne(name)
    services.worker()
    services.beat()
    wait_for(lambda: all(_listening(p) for p in services.ports.values()), 60, "both servers to listen", services)
    wait_for(services.worker_ready, 60, "the worker to be ready", services)
    for node in NODES:
        services.agent(node, agent_token_issue(node=Node.objects.get(name=node)))
    wait_for(lambda: Node.objects.filter(last_heartbeat_at__isnull=False).count() == len(NODES), 60,
             "every agent's hello", services)
    mark("up: 2 servers, worker, beat, 4 agents")
    port_a, port_b = services.ports["a"], services.ports["b"]

    accepted: list[int] = []
    for i in range(6):  # physics' low-class work fills the four nodes, through both servers
        _submit(port_a if i % 2 else port_b, tokens["alice"], 1, accepted)
    wait_for(lambda: Allocation.objects.filter(state="running").count() == len(NODES), 30,
             "the low-class work to fill the nodes", services)
    # A heartbeat of B's agents after their work started: when they reconnect, that work counts as
    # known to them (not a start they may have missed), and is declared lost if they do not report it.
    wait_for(_b_heard_since_starts, 25, "a heartbeat from B's agents after their work started", services)
    status, body = _call(port_a, tokens["operator"], "nodes/n4/drain/", {"reason": "fault test: maintenance"})
    assert status == 200, body
    mark(f"filled; n4 drained; accepted {accepted}")
    for i in range(3):  # chemistry's high-class work preempts it
        _submit(port_b if i % 2 else port_a, tokens["bob"], 7, accepted)
    wait_for(_leaving, 30, "a preemption in flight", services)
    mark(f"preempting: {_states()}")

    services.kill("worker")
    services.kill("daphne-b")
    killed = time.monotonic()
    mark("SIGKILL worker and server B")
    time.sleep(2)
    services.worker()
    mark("worker restarted")
    for klass, user in ((1, "alice"), (7, "bob"), (1, "alice")):  # A keeps taking work meanwhile
        _submit(port_a, tokens[user], klass, accepted)
    time.sleep(max(0.0, DOWN_S - (time.monotonic() - killed)))
    mark(f"before B restarts: {_states()} nodes {dict(Node.objects.values_list('name', 'state'))}")
    restarted = timezone.now()
    services.daphne("b")
    wait_for(lambda: _listening(port_b), 60, "server B to listen again", services)
    mark("server B restarted")

    wait_for(lambda: _settled(restarted), SETTLE_S, "the system to settle", services)
    # Reports kept by B's agents while it was down arrive after their hello: wait until every exit
    # an agent reported has been applied (an exit superseded while its agent was cut off never
    # is: the wait then ends at its limit and the invariants are checked all the same).
    applied = _applied(services.exit_frames, REPORTS_S)
    mark("every exit the agents reported applied" if applied else "not every exit reported was applied")
    sweep()
    mark(f"settled and swept: {_states()}")

    results = invariants.check_all(accepted_ids=accepted, exits=services.exits(), grace_s=10)
    assert invariants.violated(results) == [], _report(results, timeline)
    # Each phase's wait bounds it; this keeps the whole run from creeping, with room for a
    # loaded machine's slow starts of five Python programs and four agents.
    assert time.monotonic() - started < 300, timeline


def _states() -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in Allocation.objects.values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts
