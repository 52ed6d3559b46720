"""Runs: each start of an allocation is a run of it, numbered in its start frames, and an agent's
report of an earlier run changes nothing of the run now under way.

An allocation checkpointed, requeued and started again may land on the same nodes; the first run's
process may still report (its exit, a checkpoint, a start) after the second run began. Judged by
state alone, an exit 0 of the first run on one node of a multi-node second run freed that node while
the second run still used it. The real pass and actions drive it here, frames recorded as sent.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from nodes.actions import allocation_report, node_hello
from nodes.agent import Agent
from nodes.late_exits import only_an_earlier_run_here
from nodes.models import Node
from nodes.protocol import BadFrame, CheckpointDone, Exited, Hello, Started, parse
from scheduling import dispatch
from scheduling.actions.admission import allocation_cancel
from scheduling.actions.batch import allocation_requeue
from scheduling.actions.lifecycle import allocation_deadline
from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.passes.run import schedule_pass
from tests.nodes.conftest import ROOT_LEAVE
from tests.nodes.test_agent import Recorder

pytestmark = pytest.mark.django_db

_ids = itertools.count(1)


@pytest.fixture
def sent(monkeypatch, django_capture_on_commit_callbacks):
    """Every command the control plane sends after commit, as (node, frame); ``sent.step(fn, ...)``
    runs ``fn`` and its on-commit callbacks."""
    frames: list[tuple[str, dict[str, Any]]] = []

    def deliver(messages: list[tuple[str, dict[str, Any]]], what: str) -> None:
        frames.extend((group.removeprefix("agent."), m["frame"]) for group, m in messages
                      if group.startswith("agent.") and m.get("type") == "agent.command")

    class NoTask:
        def delay(self, *a: Any) -> None: ...
        def apply_async(self, *a: Any, **k: Any) -> None: ...

    monkeypatch.setattr(dispatch, "_send_all", deliver)
    monkeypatch.setattr(dispatch, "_task", lambda name: NoTask())

    class Sent(list):  # type: ignore[type-arg]
        def step(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
            with django_capture_on_commit_callbacks(execute=True):
                return fn(*args, **kwargs)

    out = Sent()
    out.frames = frames  # type: ignore[attr-defined]
    return out


def _state(alloc: Allocation) -> str:
    alloc.refresh_from_db()
    return alloc.state


def _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes: int) -> Allocation:
    """Work on ``nodes`` nodes, checkpointed for a one-node job of a higher class, then started again
    on the same nodes once that job completed: its second run."""
    work = make_allocation(state="pending", node_count=nodes, per_node_gpu=8, preemption_class=2,
                           checkpoint="auto", vcluster=vcluster_hpc)
    sent.step(schedule_pass, resource_group.pk)
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7,
                           checkpoint="auto", vcluster=vcluster_hpc)
    sent.step(schedule_pass, resource_group.pk)
    assert _state(work) == "checkpointing"
    sent.step(allocation_checkpoint_done, allocation=work, ok=True, location="/ckpt/1", size_bytes=1)
    sent.step(schedule_pass, resource_group.pk)
    assert _state(high) == "running"
    [high_node] = high.placements.values_list("node__name", flat=True)
    sent.step(_report, high_node, Exited(id=f"x{next(_ids)}", allocation=str(high.pk), exit_code=0,
                                         reason="completed", run=1))
    sent.step(schedule_pass, resource_group.pk)
    assert _state(work) == "running"
    return work


def _report(node_name: str, frame: Any) -> bool:
    return allocation_report(node=Node.objects.get(name=node_name), frame=frame)


def _starts(sent, alloc: Allocation) -> list[tuple[str, int]]:
    return [(node, f["run"]) for node, f in sent.frames if f["type"] == "start" and f["allocation"] == str(alloc.pk)]


def test_each_start_is_a_new_run_and_its_start_frames_say_which(sent, make_allocation, resource_group,
                                                                  vcluster_hpc, two_nodes):
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=2)
    assert sorted(_starts(sent, work)) == [("gpu-a", 1), ("gpu-a", 2), ("gpu-b", 1), ("gpu-b", 2)]
    assert Allocation.objects.get(pk=work.pk).run == 2


def test_a_late_exit_0_of_an_earlier_run_frees_no_node_of_the_run_now(sent, make_allocation, resource_group,
                                                                        vcluster_hpc, two_nodes):
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=2)
    late = Exited(id=f"x{next(_ids)}", allocation=str(work.pk), exit_code=0, reason="completed", run=1)
    assert sent.step(_report, "gpu-a", late) is True  # acknowledged: it is no error of the agent's
    assert _state(work) == "running"
    assert sorted(Placement.objects.filter(allocation=work).values_list("node__name", flat=True)) == [
        "gpu-a", "gpu-b"]
    assert work.events.latest("id").reason == ("exit of run 1 on gpu-a ignored: completed (0); "
                                               "run 2 is its own")
    # The second run's own exit on one node frees that node alone, as before.
    sent.step(_report, "gpu-a", Exited(id=f"x{next(_ids)}", allocation=str(work.pk), exit_code=0,
                                       reason="completed", run=2))
    assert _state(work) == "running"
    assert list(Placement.objects.filter(allocation=work).values_list("node__name", flat=True)) == ["gpu-b"]


def test_a_late_checkpoint_or_start_of_an_earlier_run_changes_nothing(sent, make_allocation, resource_group,
                                                                       vcluster_hpc, node_gpu_a):
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    rows = AllocationEvent.objects.filter(allocation=work).count()
    sent.step(_report, "gpu-a", Started(id=f"s{next(_ids)}", allocation=str(work.pk), pid=11, run=1))
    assert AllocationEvent.objects.filter(allocation=work).count() == rows  # no "started on" for run 2

    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                    vcluster=vcluster_hpc)
    sent.step(schedule_pass, resource_group.pk)
    assert _state(work) == "checkpointing"  # the second run is asked to checkpoint
    sent.step(_report, "gpu-a", CheckpointDone(id=f"c{next(_ids)}", allocation=str(work.pk), ok=True,
                                               location="/ckpt/old", run=1))
    assert _state(work) == "checkpointing"  # the first run's checkpoint is not this one's
    sent.step(_report, "gpu-a", CheckpointDone(id=f"c{next(_ids)}", allocation=str(work.pk), ok=True,
                                               location="/ckpt/2", run=2))
    assert _state(work) == "pending"
    assert Allocation.objects.get(pk=work.pk).checkpoint_location == "/ckpt/2"


def test_reports_naming_no_run_are_judged_by_state_as_from_older_agents(sent, make_allocation, resource_group,
                                                                        vcluster_hpc, node_gpu_a):
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    sent.step(_report, "gpu-a", Exited(id=f"x{next(_ids)}", allocation=str(work.pk), exit_code=0,
                                       reason="completed"))
    assert _state(work) == "completed"


def test_a_hello_listing_an_earlier_run_kills_it_and_starts_the_run_placed_here(sent, make_allocation,
                                                                                resource_group, vcluster_hpc,
                                                                                node_gpu_a):
    """The agent still runs the first run's process and never got the second run's start: the old
    process is killed, then the start sent again (the agent starts it once the old one is gone)."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    Node.objects.filter(pk=node_gpu_a.pk).update(last_heartbeat_at=None)  # never heard before: start again
    reply = node_hello(node=node_gpu_a, frame=Hello(
        id="h1", agent_version="t", capacity={}, labels={},
        running=[{"allocation": str(work.pk), "phase": "running", "pid": 5, "run": 1}]))
    assert [(f["type"], f.get("run")) for f in reply.frames] == [("welcome", None), ("kill", None), ("start", 2)]
    assert _state(work) == "running"

    reply = node_hello(node=node_gpu_a, frame=Hello(
        id="h2", agent_version="t", capacity={}, labels={},
        running=[{"allocation": str(work.pk), "phase": "running", "pid": 6, "run": 2}]))
    assert [f["type"] for f in reply.frames] == ["welcome"]  # its own run: nothing to say


@pytest.mark.parametrize("run", ["true", "-1", "2147483648", "1.0", '"1"'])
def test_a_report_s_run_must_be_a_small_non_negative_integer(run):
    with pytest.raises(BadFrame):
        parse(f'{{"type": "exited", "id": "e", "allocation": "7", "exit_code": 0, "reason": "completed", "run": {run}}}')
    with pytest.raises(BadFrame):
        parse('{"type": "hello", "id": "h", "agent_version": "t", "capacity": {}, "labels": {}, '
              f'"running": [{{"allocation": "7", "run": {run}}}]}}')


def test_a_report_s_run_is_optional():
    assert parse('{"type": "exited", "id": "e", "allocation": "7", "exit_code": 0, "reason": "completed"}').run == 0
    assert parse('{"type": "defer", "id": "d", "allocation": "7", "seconds": 5, "run": 4}').run == 4


IGNORES_SIGTERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"


def _agent_stopping_run_1_with_run_2_waiting(workdir: Path, alloc: str, then: Any = None) -> tuple[list, list]:
    """A real agent that runs run 1 of ``alloc``, is told to terminate it (it outlives the SIGTERM)
    and gets run 2's start, which waits for run 1 to go; then ``then(agent)``. Its hello entries
    at that point, and every frame it sent."""
    async def scenario() -> tuple[list, list]:
        agent = Agent("ws://unused/", "token", workdir, simulate=False)
        agent.ws = Recorder()
        start = {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", IGNORES_SIGTERM],
                 "env": {}, "resources": {}, "resume_from_checkpoint": False,
                 "checkpoint_dir": f"checkpoints/{alloc}", "run": 1, **ROOT_LEAVE}
        await agent.handle(start)
        await asyncio.sleep(0.5)  # the interpreter is up and ignores SIGTERM
        await agent.handle({"type": "terminate", "allocation": alloc, "grace_s": 600})
        await agent.handle({**start, "run": 2, "resume_from_checkpoint": True})
        assert set(agent.waiting) == {alloc}
        hello = agent._hello()["running"]
        if then is not None:
            await then(agent)
        for entry in list(agent.running.values()):
            os.killpg(entry.pid, 9)
        await asyncio.sleep(0.3)
        return hello, agent.ws.frames

    return asyncio.run(scenario())


def test_a_hello_listing_the_run_placed_here_as_waiting_beside_the_earlier_one_loses_nothing(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a, tmp_path):
    """The agent got run 2's start while connected (it waits for run 1's process to go), then
    reconnects. Its hello must show run 2; judged by run 1 alone, the control plane killed the
    allocation there (the kill drops the waiting start) and counted run 2 lost."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    Node.objects.filter(pk=node_gpu_a.pk).update(last_heartbeat_at=timezone.now())  # heard since its start
    hello, _ = _agent_stopping_run_1_with_run_2_waiting(tmp_path, str(work.pk))
    assert sorted((e["phase"], e.get("run")) for e in hello) == [("running", 1), ("waiting", 2)]
    reply = node_hello(node=node_gpu_a, frame=Hello(id="h1", agent_version="t", capacity={}, labels={},
                                                    running=hello))
    assert [f["type"] for f in reply.frames] == ["welcome"]
    reply = node_hello(node=node_gpu_a, frame=Hello(id="h2", agent_version="t", capacity={}, labels={},
                                                    running=hello[::-1]))  # in whatever order
    assert [f["type"] for f in reply.frames] == ["welcome"]
    assert _state(work) == "running"


def test_a_cancel_of_a_run_still_waiting_for_its_earlier_run_ends_it_at_once(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a, tmp_path):
    """Run 2 waits for run 1's process to go when it is cancelled: the agent drops it, and must
    report its exit. Run 1's exit, naming run 1, is ignored: without run 2's own, the cancel
    waited for the kill after the grace."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    sent.step(allocation_cancel, allocation=work, actor=None, reason="not needed")
    assert _state(work) == "terminating"

    async def cancelled(agent: Agent) -> None:
        await agent.handle({"type": "terminate", "allocation": str(work.pk), "grace_s": 600})
        await asyncio.sleep(0.3)

    _, frames = _agent_stopping_run_1_with_run_2_waiting(tmp_path, str(work.pk), cancelled)
    for frame in frames:
        if frame["type"] == "exited":
            sent.step(_report, "gpu-a", parse(json.dumps(frame)))
    assert ("exited", "terminated", 2) in [(f["type"], f.get("reason"), f.get("run")) for f in frames]
    assert _state(work) == "cancelled"


def _checkpointing_second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes: int) -> Allocation:
    """The second run (resuming from /ckpt/1), asked to checkpoint for a higher class's job."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=nodes)
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                    vcluster=vcluster_hpc)
    sent.step(schedule_pass, resource_group.pk)
    assert _state(work) == "checkpointing"
    return work


def test_a_checkpoint_of_a_run_still_waiting_for_its_earlier_run_requeues_it_as_it_was(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a, tmp_path):
    """Run 2 waits for run 1's process to go when a higher class preempts it: the agent has nothing
    to checkpoint and drops the start. Before, it ignored the hint and the checkpoint's deadline
    failed work that had never run; now it says so, and the work resumes from the checkpoint it had."""
    work = _checkpointing_second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)

    async def checkpoint(agent: Agent) -> None:
        await agent.handle({"type": "checkpoint", "allocation": str(work.pk), "deadline": "2026-01-01T00:00:00+00:00"})
        for _ in range(100):
            if not agent.waiting:
                break
            await asyncio.sleep(0.05)
        assert agent.waiting == {}

    _, frames = _agent_stopping_run_1_with_run_2_waiting(tmp_path, str(work.pk), checkpoint)
    told = [(f["type"], f.get("reason"), f.get("run")) for f in frames]
    assert ("exited", "not_started", 2) in told and ("started", None, 2) not in told  # dropped, never started
    for frame in frames:
        if frame["type"] == "exited" and frame["run"] == 2:
            assert sent.step(_report, "gpu-a", parse(json.dumps(frame))) is True
    work.refresh_from_db()
    assert (work.state, work.resume_from_checkpoint, work.checkpoint_location) == ("pending", True, "/ckpt/1")
    assert not Placement.objects.filter(allocation=work).exists()
    assert list(work.events.order_by("-id").values_list("reason", flat=True)[:2]) == [
        "requeued after preemption", "its run 2 was stopped before it started: nothing to checkpoint"]


def test_a_run_not_started_on_one_node_of_several_is_stopped_everywhere_and_requeued_as_it_was(
        sent, make_allocation, resource_group, vcluster_hpc, two_nodes):
    """A rank never started, so the processes on the other nodes could not go past the last
    checkpoint (a gang waits for its missing rank, and may never write one): leaving the checkpoint
    to them had the deadline fail work that never ran whole. They are stopped, and it resumes from
    the checkpoint it had."""
    work = _checkpointing_second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=2)
    sent.frames.clear()
    sent.step(_report, "gpu-a", Exited(id=f"x{next(_ids)}", allocation=str(work.pk), exit_code=None,
                                       reason="not_started", run=2))
    work.refresh_from_db()
    assert (work.state, work.leaving) == ("terminating", "not_started")
    assert list(Placement.objects.filter(allocation=work).values_list("node__name", flat=True)) == ["gpu-b"]
    assert [(node, f["type"]) for node, f in sent.frames] == [("gpu-b", "terminate")]
    sent.step(_report, "gpu-b", CheckpointDone(id=f"c{next(_ids)}", allocation=str(work.pk), ok=True,
                                               location="/ckpt/partial", run=2))  # too late: not taken
    sent.step(_report, "gpu-b", Exited(id=f"x{next(_ids)}", allocation=str(work.pk), exit_code=-15,
                                       reason="terminated", run=2))
    work.refresh_from_db()
    assert (work.state, work.resume_from_checkpoint, work.checkpoint_location) == ("pending", True, "/ckpt/1")
    assert not Placement.objects.filter(allocation=work).exists()


def _hello_of_run_1_only(node: Node, work: Allocation) -> list[tuple[str, Any]]:
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now())  # heard since run 2's start
    reply = node_hello(node=node, frame=Hello(
        id=f"h{next(_ids)}", agent_version="t", capacity={}, labels={},
        running=[{"allocation": str(work.pk), "phase": "running", "pid": 5, "run": 1}]))
    return [(f["type"], f.get("run")) for f in reply.frames]


def test_a_hello_listing_only_an_earlier_run_means_the_run_now_never_started_there(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    """The agent never got run 2's start (it runs run 2 only once run 1 is gone, and run 1 is
    still there). Heard from since that start, it was declared lost and failed: run 2 never ran."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    assert _hello_of_run_1_only(node_gpu_a, work) == [("welcome", None), ("kill", None), ("start", 2)]
    assert _state(work) == "running"


def test_a_hello_listing_only_an_earlier_run_of_work_asked_to_checkpoint_requeues_it_as_it_was(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    work = _checkpointing_second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    assert _hello_of_run_1_only(node_gpu_a, work) == [("welcome", None), ("kill", None)]
    work.refresh_from_db()
    assert (work.state, work.resume_from_checkpoint, work.checkpoint_location) == ("pending", True, "/ckpt/1")
    reasons = list(work.events.order_by("id").values_list("reason", flat=True))
    assert reasons[-3:] == ["run 2 never started on gpu-a: its agent still ran an earlier run at reconnect",
                            "its run 2 was stopped before it started: nothing to checkpoint",
                            "requeued after preemption"]


def test_a_hello_listing_only_an_earlier_run_of_work_being_cancelled_ends_it(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    sent.step(allocation_cancel, allocation=work, actor=None, reason="not needed")
    assert _hello_of_run_1_only(node_gpu_a, work) == [("welcome", None), ("kill", None)]
    assert _state(work) == "cancelled"
    assert not Placement.objects.filter(allocation=work).exists()
    assert work.events.filter(reason__startswith="run 2 never started on gpu-a").exists()  # not "lost"


def test_a_hello_judging_a_run_that_changed_since_it_read_it_fails_nothing_of_the_run_now(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    """The hello reads the node's placements, then judges each: meanwhile another transaction may
    have moved the work on (run 2's checkpoint done, run 3 started on the node). Judged by what it
    read (run 2, checkpointing), run 3 was failed as not started, its node freed under the process
    its start was about to run, and a history row said it was checkpointing again."""
    work = _checkpointing_second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    read_by_the_hello = Placement.objects.select_related("allocation__tenant").get(allocation=work)
    sent.step(_report, "gpu-a", CheckpointDone(id=f"c{next(_ids)}", allocation=str(work.pk), ok=True,
                                               location="/ckpt/2", run=2))
    sent.step(schedule_pass, resource_group.pk)  # the job it was checkpointed for runs, then completes
    [high] = Allocation.objects.filter(preemption_class=7, state="running")
    sent.step(_report, "gpu-a", Exited(id=f"x{next(_ids)}", allocation=str(high.pk), exit_code=0,
                                       reason="completed", run=1))
    sent.step(schedule_pass, resource_group.pk)
    work.refresh_from_db()
    assert (work.state, work.run) == ("running", 3)
    rows = work.events.count()
    frames = sent.step(only_an_earlier_run_here, placement=read_by_the_hello,
                       node=Node.objects.get(name="gpu-a"), now=timezone.now())
    assert _state(work) == "running"
    assert list(Placement.objects.filter(allocation=work).values_list("node__name", flat=True)) == ["gpu-a"]
    assert work.events.count() == rows
    assert ("start", 2) not in [(f["type"], f.get("run")) for f in frames]


def test_a_checkpoint_or_stop_as_a_waiting_start_spawns_signals_its_process_not_the_agent(tmp_path, monkeypatch):
    """Run 1's process gone, run 2 leaves ``waiting`` and is being spawned (its pid not known yet)
    when its checkpoint and then a terminate come. Sent to pid 0, os.killpg signalled the agent's
    own process group: SIGUSR1 (no handler) or SIGKILL ends the agent."""
    signalled: list[tuple[int, int]] = []
    real_killpg, real_spawn = os.killpg, asyncio.create_subprocess_exec

    def killpg(pid: int, sig: int) -> None:
        signalled.append((pid, sig))
        if pid > 0:
            real_killpg(pid, sig)

    async def scenario() -> None:
        gate = asyncio.Event()

        async def slow_spawn(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()  # a fork and exec that takes a while
            return await real_spawn(*args, **kwargs)

        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        start = {"type": "start", "allocation": "7", "command": [sys.executable, "-c", IGNORES_SIGTERM],
                 "env": {}, "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": "checkpoints/7",
                 "run": 1, **ROOT_LEAVE}
        await agent.handle(start)
        await asyncio.sleep(0.5)  # the interpreter is up and ignores SIGTERM
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
        await agent.handle({**start, "run": 2})
        monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_spawn)
        real_killpg(agent.running["7"].pid, 9)  # run 1 goes: run 2 is spawned
        for _ in range(100):
            if not agent.waiting and agent.running.get("7") is not None and agent.running["7"].run == 2:
                break
            await asyncio.sleep(0.05)
        assert agent.running["7"].run == 2 and agent.running["7"].pid == 0  # being spawned
        await agent.handle({"type": "checkpoint", "allocation": "7", "deadline": "2026-01-01T00:00:00+00:00"})
        await asyncio.sleep(0.1)
        await agent.handle({"type": "kill", "allocation": "7"})
        gate.set()
        for _ in range(100):
            if "7" not in agent.running:
                break
            await asyncio.sleep(0.05)
        assert "7" not in agent.running  # the kill reached run 2's process once it had one

    monkeypatch.setattr(os, "killpg", killpg)
    asyncio.run(scenario())
    assert all(pid > 0 for pid, _ in signalled), signalled


def test_stopped_everywhere_after_a_rank_never_started_and_killed_after_the_grace_it_still_resumes(
        sent, make_allocation, resource_group, vcluster_hpc, two_nodes):
    work = _checkpointing_second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=2)
    sent.step(_report, "gpu-a", Exited(id=f"x{next(_ids)}", allocation=str(work.pk), exit_code=None,
                                       reason="not_started", run=2))
    work.refresh_from_db()
    sent.step(allocation_deadline, allocation=work, now=work.deadline_at + timedelta(seconds=1))
    work.refresh_from_db()
    assert (work.state, work.resume_from_checkpoint, work.checkpoint_location) == ("pending", True, "/ckpt/1")


def test_a_hello_listing_only_an_earlier_run_of_work_an_operator_requeues_keeps_its_checkpoint(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    """Run 2 (resuming from /ckpt/1) never started when an operator sent it back to the queue: it
    resumes from /ckpt/1 again; judged as stopped, it started over from nothing."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    sent.step(allocation_requeue, allocation=work, actor=None, reason="maintenance")
    assert _state(work) == "terminating"
    assert _hello_of_run_1_only(node_gpu_a, work) == [("welcome", None), ("kill", None)]
    work.refresh_from_db()
    assert (work.state, work.resume_from_checkpoint, work.checkpoint_location) == ("pending", True, "/ckpt/1")


def test_an_operator_s_requeue_whose_process_outlives_the_grace_says_so_and_starts_over(
        sent, make_allocation, resource_group, vcluster_hpc, node_gpu_a):
    """Its run started (no agent says otherwise): killed after the grace, it is back in the queue
    as an operator's requeue, starting over; a run that never started is another case (above)."""
    work = _second_run(sent, make_allocation, resource_group, vcluster_hpc, nodes=1)
    sent.step(allocation_requeue, allocation=work, actor=None, reason="maintenance")
    work.refresh_from_db()
    sent.step(allocation_deadline, allocation=work, now=work.deadline_at + timedelta(seconds=1))
    work.refresh_from_db()
    assert (work.state, work.resume_from_checkpoint) == ("pending", False)
    assert work.events.latest("id").reason == "requeued by an operator (killed after grace)"
    assert ("gpu-a", "kill") in [(node, f["type"]) for node, f in sent.frames if f.get("allocation") == str(work.pk)]
