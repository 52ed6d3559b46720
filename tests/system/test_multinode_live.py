"""Work on several nodes, in the running system: one allocation placed on three nodes, a real
process on each, run by that node's own agent.

One real Daphne on PostgreSQL and Redis (one for the module), the real agent program (one per
node, each with its own work directory) connected to it, submissions and cancels over REST, the
real pass (Celery eager: a submission's pass runs at its commit), each agent's reports over the
socket, and the history the tenant reads back through the API.

Each node's process is the small program ``APP``: it waits for the test to write its exit code
into its checkpoint directory (so the test decides which node's process ends when), writes its
pid there, and on SIGTERM notes that it was signalled before it dies of it, lingering first while
a ``linger`` file is there. What the test checks is what happened to those processes and what the
control plane recorded and freed.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from nodes.actions import agent_token_issue
from nodes.models import Node
from nodes.processes import alive
from scheduling.models import Allocation, Placement
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import agent_factory, daphne, root_allowed, wait_for  # noqa: F401
from tests.scheduling.seed_e2e import (
    client_for,
    eager_passes,  # noqa: F401  (autouse)
    nodes,
    one_control_plane,  # noqa: F401  (the module's one Daphne)
    submitted,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

NODES = ("gpu-a", "gpu-b", "gpu-c")

APP = '''
import os, pathlib, signal, sys, time
d = pathlib.Path(os.environ["LATTICE_CHECKPOINT_DIR"])
def leave(*_):
    (d / "terminated").write_text("")
    while (d / "linger").exists():
        time.sleep(0.05)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
signal.signal(signal.SIGTERM, leave)
(d / "pid.tmp").write_text(str(os.getpid()))
(d / "pid.tmp").replace(d / "pid")
end = time.monotonic() + 120  # a failed test leaves nothing running for long
while not (d / "exit").exists() and time.monotonic() < end:
    time.sleep(0.05)
sys.exit(int((d / "exit").read_text()) if (d / "exit").exists() else 2)
'''


class Cluster:
    """Three nodes, each with its agent process, and the file each node's process reads."""

    def __init__(self, tmp_path: Path, agent_factory, group, vc) -> None:  # noqa: F811
        self.tmp, self.start_agent = tmp_path, agent_factory
        self.app = tmp_path / "app.py"
        self.app.write_text(APP)
        self.tokens = {node.name: agent_token_issue(node=node) for node in nodes(group, vc, len(NODES))}
        self.agents = {name: self.agent(name) for name in NODES}

    def agent(self, name: str):
        """Start ``name``'s agent and wait for its hello."""
        before = Node.objects.get(name=name).last_heartbeat_at
        proc = self.start_agent(self.tokens[name], workdir=self.tmp / name, args=("--log-level", "WARNING"))
        wait_for(lambda: Node.objects.get(name=name).last_heartbeat_at != before, 60, f"{name}'s agent's hello")
        return proc

    def submitted(self, **body) -> int:
        """Alice's job on all three nodes, once each node's agent reported its process started."""
        job = submitted(client_for("alice"), nodes=len(NODES), per_node={"gpu": 8},
                        command=[sys.executable, str(self.app)], **body)
        wait_for(lambda: all(self.pid(name, job) for name in NODES), 30, "a process on every node")
        wait_for(lambda: all(f"{name} (pid " in _started(job) for name in NODES), 30,
                 "every agent to report its start")
        return job

    def dir(self, name: str, job: int) -> Path:
        return self.tmp / name / "checkpoints" / str(job)

    def pid(self, name: str, job: int) -> int:
        path = self.dir(name, job) / "pid"
        return int(path.read_text()) if path.exists() else 0

    def running(self, name: str, job: int) -> bool:
        return alive(self.pid(name, job))

    def exit(self, name: str, job: int, code: int) -> None:
        """The process on ``name`` ends by itself with ``code``."""
        tmp = self.dir(name, job) / "exit.tmp"
        tmp.write_text(str(code))
        tmp.replace(self.dir(name, job) / "exit")
        wait_for(lambda: not self.running(name, job), 10, f"the process on {name} to exit")

    def signalled(self, name: str, job: int) -> bool:
        return (self.dir(name, job) / "terminated").exists()


@pytest.fixture
def cluster(tmp_path, agent_factory, resource_group, vcluster_hpc, tenant_physics):  # noqa: F811
    root_allowed(tenant_physics)
    return Cluster(tmp_path, agent_factory, resource_group, vcluster_hpc)


def _started(job: int) -> str:
    return " ".join(Allocation.objects.get(pk=job).events.filter(reason__startswith="started on")
                    .values_list("reason", flat=True))


def held(job: int) -> set[str]:
    """The nodes the allocation still holds."""
    return set(Placement.objects.filter(allocation_id=job).values_list("node__name", flat=True))


def history(job: int) -> list[dict]:
    response = client_for("alice").get(f"/api/v1/allocations/{job}/events/")
    assert response.status_code == 200, response.content
    return response.json()["results"]


def state(job: int) -> str:
    """The allocation's state as its tenant reads it."""
    return client_for("alice").get(f"/api/v1/allocations/{job}/").json()["state"]


def now_in(job: int, *states: str) -> str | None:
    """The allocation's state if it is one of ``states`` (polled from the database)."""
    current = Allocation.objects.get(pk=job).state
    return current if current in states else None


def test_work_on_three_nodes_completes_and_each_node_is_freed_as_its_process_ends(cluster, resource_group):
    job = cluster.submitted()
    waiting = submitted(client_for("alice"), nodes=1, per_node={"gpu": 8}, command=[sys.executable, "-c", "pass"])
    assert state(waiting) == "pending"  # every node is taken

    cluster.exit("gpu-c", job, 0)
    wait_for(lambda: held(job) == {"gpu-a", "gpu-b"}, 30, "gpu-c to be freed")
    assert state(job) == "running"
    assert cluster.running("gpu-a", job) and cluster.running("gpu-b", job)
    # The freed node takes waiting work while the others still run the job.
    schedule_pass(resource_group.pk)
    wait_for(lambda: now_in(waiting, "completed", "failed"), 30, "the waiting job to run on gpu-c")
    assert state(waiting) == "completed"
    assert Allocation.objects.get(pk=waiting).ran_on == ["gpu-c"]
    assert state(job) == "running" and held(job) == {"gpu-a", "gpu-b"}

    cluster.exit("gpu-a", job, 0)
    wait_for(lambda: held(job) == {"gpu-b"}, 30, "gpu-a to be freed")
    assert state(job) == "running" and cluster.running("gpu-b", job)
    cluster.exit("gpu-b", job, 0)
    wait_for(lambda: now_in(job, "completed", "failed"), 30, "the job to end")
    assert state(job) == "completed"
    assert not held(job)
    assert not any(cluster.signalled(name, job) for name in NODES)  # no process was stopped

    rows = history(job)
    assert [(r["from_state"], r["to_state"]) for r in rows if r["from_state"] != r["to_state"]] == [
        ("", "pending"), ("pending", "running"), ("running", "completed")]
    assert [r["reason"] for r in rows if r["reason"].startswith("exited")] == [
        "exited on gpu-c: completed (0); 2 more node(s) still running",
        "exited on gpu-a: completed (0); 1 more node(s) still running",
        "exited: completed (0)"]
    assert client_for("alice").get(f"/api/v1/allocations/{job}/").json()["exit_code"] == 0


def test_a_process_failing_on_one_node_fails_the_work_and_its_agents_stop_the_others(cluster):
    job = cluster.submitted()
    # gpu-c's agent dies: nothing can tell its process to stop, which completes later by itself.
    cluster.agents["gpu-c"].send_signal(signal.SIGKILL)
    cluster.agents["gpu-c"].wait(timeout=10)

    cluster.exit("gpu-a", job, 1)
    wait_for(lambda: now_in(job, "terminating", "failed"), 30, "the failure to be reported")
    wait_for(lambda: held(job) == {"gpu-c"}, 30, "gpu-b's agent to stop its process")
    assert cluster.signalled("gpu-b", job) and not cluster.running("gpu-b", job)
    assert cluster.running("gpu-c", job) and not cluster.signalled("gpu-c", job)
    assert state(job) == "terminating"  # gpu-c's process may still run: it keeps its node

    cluster.exit("gpu-c", job, 0)
    cluster.agents["gpu-c"] = cluster.agent("gpu-c")  # back: it reports the exit it missed
    wait_for(lambda: now_in(job, "failed", "completed"), 30, "gpu-c's exit to be reported")
    assert state(job) == "failed"
    assert not held(job)

    rows = history(job)
    assert [(r["from_state"], r["to_state"]) for r in rows if r["from_state"] != r["to_state"]] == [
        ("", "pending"), ("pending", "running"), ("running", "terminating"), ("terminating", "failed")]
    reasons = [r["reason"] for r in rows if "exited" in r["reason"]]
    assert reasons == ["exited on gpu-a: failed (1); 2 more node(s) still running",  # gpu-a freed
                       "exited on gpu-a: failed (1): stopping",
                       "exited on gpu-b: terminated (-15); 1 more node(s) still leaving",
                       "exited on gpu-a: failed (1); exited: completed (0)"]
    # The exit 0 that came last did not make it completed, nor its exit code 0.
    assert client_for("alice").get(f"/api/v1/allocations/{job}/").json()["exit_code"] == 1
    time.sleep(0.5)
    assert state(job) == "failed"


def test_a_cancel_of_work_on_three_nodes_waits_for_every_agent_to_report_its_process_gone(cluster):
    job = cluster.submitted()
    (cluster.dir("gpu-c", job) / "linger").write_text("")  # gpu-c's process takes its time to leave

    response = client_for("alice").post(f"/api/v1/allocations/{job}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "terminating"
    wait_for(lambda: held(job) == {"gpu-c"}, 30, "gpu-a's and gpu-b's agents to stop their processes")
    wait_for(lambda: cluster.signalled("gpu-c", job), 10, "gpu-c's agent to signal its process")
    for name in ("gpu-a", "gpu-b"):
        assert cluster.signalled(name, job) and not cluster.running(name, job)
    assert cluster.running("gpu-c", job)
    time.sleep(0.5)
    assert state(job) == "terminating" and held(job) == {"gpu-c"}  # gpu-c's process is still there

    (cluster.dir("gpu-c", job) / "linger").unlink()
    wait_for(lambda: now_in(job, "cancelled", "failed", "completed"), 30,
             "gpu-c's agent to report its process gone")
    assert state(job) == "cancelled"
    assert not held(job) and not cluster.running("gpu-c", job)

    rows = history(job)
    assert [(r["from_state"], r["to_state"], r["actor"]) for r in rows if r["from_state"] != r["to_state"]] == [
        ("", "pending", "alice"), ("pending", "running", None), ("running", "terminating", "alice"),
        ("terminating", "cancelled", None)]
    # gpu-a and gpu-b, in the order their reports came, each freeing its node alone.
    freed = sorted(r["reason"].split("; ") for r in rows if r["reason"].startswith("exited on"))
    assert [f[0] for f in freed] == ["exited on gpu-a: terminated (-15)", "exited on gpu-b: terminated (-15)"]
    assert sorted(f[1] for f in freed) == ["1 more node(s) still leaving", "2 more node(s) still leaving"]
    assert rows[-1]["reason"] == "cancelled; exited: terminated (-15)"
