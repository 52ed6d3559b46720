"""A whole preemption through a real Daphne, a real agent process and real application processes.

The low-class job runs a script that saves its progress when it gets SIGUSR1;
a high-class job arrives; the script checkpoints; the low job is suspended and
requeued; the high job runs and ends; the low job restarts with LATTICE_RESUME=1
and finds its checkpoint. Then the agent is killed and restarted mid-run and
resynchronises through hello without losing or duplicating the job; and the
control plane is killed and restarted: agents reconnect, running work goes on,
and a command issued while it was down is re-derived at the agent's hello.
Needs PostgreSQL (shared with the Daphne process) and Redis (shared channel layer).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from nodes.actions import agent_token_issue
from scheduling.models import Allocation, AllocationEvent
from scheduling.passes.run import schedule_pass
from tests.conftest import ROOT

# The test tenants map no Unix user. As root, their allow_root lets their work run as the agent
# (tests/nodes/conftest.py); as any other user, the agent needs the node operator's leave.
UNMAPPED_LEAVE = () if os.geteuid() == 0 else ("--unmapped-as-agent",)


def root_allowed(tenant):
    """``tenant`` as real agents need it here: where they run as root, allowed to run its unmapped
    work as the agent (root)."""
    if os.geteuid() == 0:
        tenant.allow_root = True
        tenant.save(update_fields=["allow_root"])
    return tenant

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

APP = '''
import json, os, pathlib, signal, sys, time
d = pathlib.Path(os.environ["LATTICE_CHECKPOINT_DIR"])
step = 0
if os.environ.get("LATTICE_RESUME") == "1":
    state = json.loads((d / "state.json").read_text())
    (d / "resumed").write_text(str(state["step"]))
def checkpoint(*_):
    (d / "state.json").write_text(json.dumps({"step": step}))
    (d / "DONE").write_text("ok")
signal.signal(signal.SIGUSR1, checkpoint)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    step += 1
    if step == 1:  # it has its handler and has made progress: a hint may come
        (d / "running").write_text("")
    time.sleep(0.05)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check, timeout: float = 30.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class ControlPlane:
    """A real Daphne on a fixed port, which a test can kill and start again (a control-plane restart)."""

    def __init__(self) -> None:
        db = connection.settings_dict
        self.url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "DATABASE_URL": self.url, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.test",
               "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING"}
        self.proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                      "lattice_site.asgi:application"], cwd=ROOT, env=env)

        def up() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(up, 30, "daphne to listen")

    def kill(self) -> None:
        """Die as a crash does: no close frames, no cleanup."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        time.sleep(0.5)  # let PostgreSQL notice the server's sessions are gone before teardown


@pytest.fixture
def control_plane():
    server = ControlPlane()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def daphne(control_plane):
    return control_plane.port


@pytest.fixture
def agent_factory(tmp_path, daphne):
    procs: list[subprocess.Popen] = []

    def start(token: str, env: dict[str, str] | None = None, workdir: Path | None = None,
              args: tuple[str, ...] = (), module: str = "nodes.agent") -> subprocess.Popen:
        # A file per agent: several may start at once (one per node), each reading its own.
        token_file = tmp_path / ("token" if not procs else f"token-{len(procs)}")
        token_file.write_text(token)
        # The node's GPUs: a fake NVML (tests/nodes/nvml_fake.py, eight GPUs unless ``env`` says
        # otherwise) that the agent imports as pynvml.
        fake = str(Path(__file__).resolve().parent / "fake_nvml")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([fake, str(ROOT)]), **(env or {})}
        # (``module``: the agent or a test's wrapper of it, taking the same arguments)
        proc = subprocess.Popen([sys.executable, "-m", module, "--url", f"ws://127.0.0.1:{daphne}/ws/agent/",
                                 "--token-file", str(token_file), "--workdir", str(workdir or tmp_path / "agent"),
                                 *UNMAPPED_LEAVE, *args],
                                cwd=ROOT, env=env)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
    # Work survives its agent on purpose (a restarted agent adopts it): end it here, in every
    # agent's work directory (one per node where several agents run). Pid 0 is a simulated run.
    for state in tmp_path.rglob("agent-state.json"):
        for info in json.loads(state.read_text()).values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if int(info["pid"]) > 0:
                    os.killpg(int(info["pid"]), signal.SIGKILL)


def test_preemption_checkpoint_and_resume_through_real_processes(tmp_path, resource_group, vcluster_hpc, node_gpu_a,
                                                                  make_allocation, agent_factory):
    app, _ = _connected_agent(tmp_path, node_gpu_a, agent_factory)

    low = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc, command=[sys.executable, str(app), "600"])
    schedule_pass(resource_group.pk)
    wait_for(lambda: AllocationEvent.objects.filter(allocation=low, reason__startswith="started on gpu-a").exists(),
             30, "the low job to start")
    wait_for((tmp_path / "agent" / "checkpoints" / str(low.pk) / "running").exists, 30,
             "the low job to make progress with its handler set")

    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                           vcluster=vcluster_hpc, command=[sys.executable, str(app), "1"])
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=low.pk).state == "pending", 30, "the checkpoint to finish")
    low.refresh_from_db()
    assert (low.preempted_count, low.resume_from_checkpoint) == (1, True)
    ckpt = Path(low.checkpoint_location)
    assert (ckpt / "state.json").exists()

    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=high.pk).state == "completed", 30, "the high job to run and end")

    schedule_pass(resource_group.pk)
    wait_for(lambda: (ckpt / "resumed").exists(), 30, "the low job to resume from its checkpoint")
    assert int((ckpt / "resumed").read_text()) > 0
    assert Allocation.objects.get(pk=low.pk).state == "running"


def test_work_preempted_while_its_start_waits_for_gpus_is_requeued_as_it_was(
        tmp_path, resource_group, vcluster_hpc, node_gpu_a, make_allocation, agent_factory):
    """The low job checkpoints for the mid one but outlives its terminate (it ignores SIGTERM), so
    the mid job's start waits at the agent for its GPUs. The high job then preempts the mid one:
    its run never started, so the agent drops the start and says so (not_started), and the mid job
    goes back to the queue as it was. Before, the agent ignored the checkpoint and the deadline
    failed work that had never run."""
    app, _ = _connected_agent(tmp_path, node_gpu_a, agent_factory)
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + APP)
    low = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc, command=[sys.executable, str(stubborn), "600"])
    schedule_pass(resource_group.pk)
    wait_for((tmp_path / "agent" / "checkpoints" / str(low.pk) / "running").exists, 30, "the low job to run")

    mid = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=5, checkpoint="auto",
                          vcluster=vcluster_hpc, command=[sys.executable, str(app), "600"])
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=low.pk).state == "pending", 30, "the low job's checkpoint")
    schedule_pass(resource_group.pk)
    assert Allocation.objects.get(pk=mid.pk).state == "running"  # placed; its start waits at the agent
    time.sleep(1)
    assert not AllocationEvent.objects.filter(allocation=mid, reason__startswith="started on").exists()

    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=9, checkpoint="auto",
                    vcluster=vcluster_hpc, command=[sys.executable, str(app), "1"])
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=mid.pk).state == "pending", 20, "the mid job to be requeued")
    mid.refresh_from_db()
    assert (mid.preempted_count, mid.resume_from_checkpoint) == (1, False)
    assert list(mid.events.order_by("id").values_list("reason", flat=True))[-2:] == [
        "its run 1 was stopped before it started: nothing to checkpoint", "requeued after preemption"]
    assert not AllocationEvent.objects.filter(allocation=mid, to_state="failed").exists()
    assert not AllocationEvent.objects.filter(allocation=mid, reason__startswith="started on").exists()


def test_agent_killed_mid_run_resynchronises_without_loss_or_duplicate(tmp_path, resource_group, vcluster_hpc,
                                                                       node_gpu_a, make_allocation, agent_factory):
    token = agent_token_issue(node=node_gpu_a)
    app, first = _connected_agent(tmp_path, node_gpu_a, agent_factory, token)
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc, command=[sys.executable, str(app), "600"])
    schedule_pass(resource_group.pk)
    wait_for(lambda: AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").exists(),
             30, "the job to start")
    pids_before = set(AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").values_list(
        "reason", flat=True))

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    last_heard = type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at
    agent_factory(token)
    # The new agent says hello and the control plane reconciles in the same transaction; then a
    # moment for anything the hello's reply made the agent report (a start sent again would be).
    wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at > last_heard, 60,
             "the new agent's hello")
    time.sleep(1)
    job.refresh_from_db()
    assert job.state == "running"
    assert not Allocation.objects.filter(requeued_from=job).exists()
    started = set(AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").values_list(
        "reason", flat=True))
    assert started == pids_before  # not started twice


def _connected_agent(tmp_path, node, agent_factory, token: str | None = None):
    """The test app written out, and an agent for ``node`` started and greeted; returns both."""
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = agent_factory(token or agent_token_issue(node=node))
    wait_for(lambda: type(node).objects.get(pk=node.pk).last_heartbeat_at, 30, "the agent's hello")
    return app, proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_control_plane_restart_loses_nothing_and_delivers_what_it_missed(
        tmp_path, resource_group, vcluster_hpc, node_gpu_a, make_allocation, agent_factory, control_plane, operator):
    from scheduling.actions.admission import allocation_cancel

    app, _ = _connected_agent(tmp_path, node_gpu_a, agent_factory)
    keep, stop = (make_allocation(state="pending", node_count=1, per_node_gpu=4, preemption_class=1,
                                  checkpoint="auto", vcluster=vcluster_hpc, command=[sys.executable, str(app), "600"])
                  for _ in range(2))
    schedule_pass(resource_group.pk)
    for job in (keep, stop):
        wait_for(lambda job=job: AllocationEvent.objects.filter(allocation=job, reason__startswith="started on")
                 .exists(), 30, f"job {job.pk} to start")
    state_file = tmp_path / "agent" / "agent-state.json"
    pids = wait_for(lambda: (lambda d: d if len(d) == 2 else None)(json.loads(state_file.read_text())), 10,
                    "the agent to record both processes")
    started_before = list(AllocationEvent.objects.filter(allocation=keep, reason__startswith="started on")
                          .values_list("reason", flat=True))

    control_plane.kill()
    allocation_cancel(allocation=stop, actor=operator)  # its terminate command finds no agent connected
    down_at = type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at
    time.sleep(1)
    control_plane.start()

    wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at > down_at, 60,
             "the agent to reconnect to the restarted control plane")
    wait_for(lambda: not _alive(int(pids[str(stop.pk)]["pid"])), 30,
             "the command missed while down to be re-derived at hello (the cancelled job's process ends)")
    keep.refresh_from_db()
    assert keep.state == "running"
    assert _alive(int(pids[str(keep.pk)]["pid"]))
    assert not Allocation.objects.filter(requeued_from=keep).exists()
    assert list(AllocationEvent.objects.filter(allocation=keep, reason__startswith="started on")
                .values_list("reason", flat=True)) == started_before  # not started twice
    # Cancelled while it ran: terminating until its agent reports the process gone, then cancelled.
    wait_for(lambda: Allocation.objects.get(pk=stop.pk).state == "cancelled", 30, "the cancelled job's exit report")


def test_an_agent_told_to_stop_closes_its_connection_and_exits_at_once(tmp_path, node_gpu_a, agent_factory):
    """SIGTERM closes the connection cleanly and the agent exits: it does not wait for its next
    heartbeat (10 s apart) to find the connection gone."""
    _, proc = _connected_agent(tmp_path, node_gpu_a, agent_factory)
    time.sleep(0.5)  # past the hello: connected and idle between heartbeats
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0


def test_an_agent_whose_clock_is_behind_its_last_run_is_heard_after_its_hello(tmp_path, node_gpu_a, agent_factory):
    """The node's stored heartbeat seq is a day ahead of the agent's clock (the previous run's clock
    was set back since, by NTP). The real agent's hello starts the sequence again: its heartbeats
    (its clock in ms) are accepted, and the node is not left to fall silent."""
    from django.utils import timezone

    from nodes.models import Node

    now_ms = int(time.time() * 1000)
    Node.objects.filter(pk=node_gpu_a.pk).update(last_seq=now_ms + 86_400_000)
    _connected_agent(tmp_path, node_gpu_a, agent_factory)
    hello_at = Node.objects.get(pk=node_gpu_a.pk).last_heartbeat_at
    # Its first heartbeat comes 10 s after the hello (the welcome's interval).
    beat = wait_for(lambda: Node.objects.filter(pk=node_gpu_a.pk, last_heartbeat_at__gt=hello_at).first(), 30,
                    "a heartbeat accepted after the hello")
    assert now_ms <= beat.last_seq <= int(time.time() * 1000)  # the agent's own clock, not the stored one
    assert beat.state == "ready" and beat.last_heartbeat_at <= timezone.now()


@pytest.mark.parametrize("agent_killed", [False, True])
def test_work_that_ends_while_its_agent_is_cut_off_is_completed_not_lost(
        tmp_path, resource_group, vcluster_hpc, node_gpu_a, make_allocation, agent_factory, control_plane,
        agent_killed):
    """The job finishes while the control plane is down; the agent keeps the exit and, once it is
    back, reports it before its hello reconciles: the job completed, was never failed, and no copy
    of it was queued. Also when the agent is killed (SIGKILL) after the exit and started again: the
    exit was kept on disk (before, it died with the agent, and the job was failed as lost)."""
    token = agent_token_issue(node=node_gpu_a)
    _, agent = _connected_agent(tmp_path, node_gpu_a, agent_factory, token)
    runs = tmp_path / "runs"
    wait_file = tmp_path / "go"
    script = (f"import os, time\nwhile not os.path.exists({str(wait_file)!r}): time.sleep(0.1)\n"
              f"open({str(runs)!r}, 'a').write('ran\\n')\n")
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                          requeue_policy="on_node_failure", command=[sys.executable, "-c", script])
    schedule_pass(resource_group.pk)
    wait_for(lambda: AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").exists(),
             30, "the job to start")
    started_at = Allocation.objects.get(pk=job.pk).started_at
    node = type(node_gpu_a).objects
    # A heartbeat after the start: the control plane knows the agent had the job (else its hello
    # would send the start again rather than count the job lost).
    wait_for(lambda: node.get(pk=node_gpu_a.pk).last_heartbeat_at > started_at, 20, "a heartbeat")
    control_plane.kill()
    down_at = node.get(pk=node_gpu_a.pk).last_heartbeat_at
    wait_file.write_text("")
    wait_for(runs.exists, 30, "the job to end while the agent is cut off")
    time.sleep(0.5)  # the agent has seen its process exit and kept the report
    if agent_killed:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
        agent_factory(token)
    control_plane.start()
    wait_for(lambda: node.get(pk=node_gpu_a.pk).last_heartbeat_at > down_at, 60, "the agent to reconnect")
    wait_for(lambda: Allocation.objects.get(pk=job.pk).state == "completed", 30, "the exit to be applied")
    assert not AllocationEvent.objects.filter(allocation=job, to_state="failed").exists()
    assert not Allocation.objects.filter(requeued_from=job).exists()
    time.sleep(1)
    assert runs.read_text() == "ran\n"  # and it ran once


ENV_APP = '''
import json, os, pathlib
pathlib.Path(os.environ["LATTICE_CHECKPOINT_DIR"], "env.json").write_text(json.dumps(dict(os.environ)))
'''


def test_two_allocations_on_one_eight_gpu_node_each_see_exactly_their_own_four_devices(
        tmp_path, resource_group, vcluster_hpc, node_gpu_a, make_allocation, agent_factory):
    app = tmp_path / "env_app.py"
    app.write_text(ENV_APP)
    agent_factory(agent_token_issue(node=node_gpu_a), env={"FAKE_NVML_GPUS": "8", "FAKE_NVML_PREFIX": "GPU-e2e"})
    wait_for(lambda: node_gpu_a.devices.count() == 8, 30, "the agent's hello with its devices")
    jobs = [make_allocation(state="pending", node_count=1, per_node_gpu=4, vcluster=vcluster_hpc,
                            command=[sys.executable, str(app)]) for _ in range(2)]
    schedule_pass(resource_group.pk)
    seen = {}
    for job in jobs:
        wait_for(lambda j=job: Allocation.objects.get(pk=j.pk).state == "completed", 30, f"job {job.pk} to end")
        env = json.loads((tmp_path / "agent" / "checkpoints" / str(job.pk) / "env.json").read_text())
        seen[job.pk] = env["CUDA_VISIBLE_DEVICES"].split(",")
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
    every = {f"GPU-e2e-{i:04d}-0000-0000-000000000000" for i in range(8)}
    assert all(len(set(uuids)) == 4 for uuids in seen.values())
    assert set(seen[jobs[0].pk]) | set(seen[jobs[1].pk]) == every  # disjoint halves of the node
