"""No node's devices go to a starting allocation while a victim still runs there.

A victim runs until its agent reports its exit, or until the control plane declares it gone:
lost with its node, or killed after the grace. The agents here are fakes that keep what each
node really runs: a process starts with ``start`` and ends with ``kill`` or when the test
reports its exit; ``terminate`` does not end it (an application that ignores SIGTERM: the
agent's own SIGKILL after the grace is the control plane's ``kill``). Every frame the control
plane sends after commit is delivered, in order, and each ``start`` is checked against what the
node still runs. The real pass and the real actions drive it, on PostgreSQL.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from nodes import partial_exits
from nodes.actions import allocation_report, node_heartbeat, node_liveness_sweep
from nodes.models import Node
from nodes.protocol import Exited, Heartbeat
from scheduling import dispatch
from scheduling.actions.admission import allocation_cancel
from scheduling.actions.lifecycle import sweep
from scheduling.actions.overrides import allocation_force_preempt
from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

_ids = itertools.count(1)


class FakeAgents:
    def __init__(self) -> None:
        self.running: dict[str, dict[str, int]] = {}  # node -> allocation id -> GPUs it uses there
        self.starts: list[tuple[str, str]] = []
        self.violations: list[str] = []
        self.sent: list[tuple[str, str, str]] = []  # (node, frame type, allocation), every command

    def deliver(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        for group, message in messages:
            if not group.startswith("agent.") or message.get("type") != "agent.command":
                continue
            node, frame = group.removeprefix("agent."), message["frame"]
            self.sent.append((node, frame["type"], frame["allocation"]))
            here = self.running.setdefault(node, {})
            if frame["type"] == "start":
                capacity = Node.objects.get(name=node).gpu
                others = {a: g for a, g in here.items() if a != frame["allocation"]}
                if others and sum(others.values()) + frame["resources"]["gpu"] > capacity:
                    self.violations.append(f"{frame['allocation']} started on {node} while {sorted(others)} "
                                           "still run there")
                here[frame["allocation"]] = frame["resources"]["gpu"]
                self.starts.append((node, frame["allocation"]))
            elif frame["type"] == "kill":
                here.pop(frame["allocation"], None)

    def exit(self, node_name: str, alloc: Allocation, *, code: int, reason: str, now: datetime) -> None:
        """The process is gone and the agent says so."""
        self.running.get(node_name, {}).pop(str(alloc.pk), None)
        allocation_report(node=Node.objects.get(name=node_name),
                          frame=Exited(id=f"x{next(_ids)}", allocation=str(alloc.pk), exit_code=code, reason=reason),
                          now=now)


@pytest.fixture
def agents(monkeypatch, django_capture_on_commit_callbacks):
    fake = FakeAgents()
    monkeypatch.setattr(dispatch, "_send_all", lambda messages, what: fake.deliver(messages))

    class NoTask:  # deadlines and passes are driven by the test, not by a broker
        def delay(self, *a: Any) -> None: ...
        def apply_async(self, *a: Any, **k: Any) -> None: ...

    monkeypatch.setattr(dispatch, "_task", lambda name: NoTask())

    def step(fn: Any, *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    fake.step = step  # type: ignore[attr-defined]
    return fake


def _job(make_allocation, vcluster, klass, nodes=1, checkpoint="auto", **kw):
    return make_allocation(state="pending", node_count=nodes, per_node_gpu=8, preemption_class=klass,
                           checkpoint=checkpoint, vcluster=vcluster, **kw)


def _state(alloc):
    alloc.refresh_from_db()
    return alloc.state


def test_a_checkpoint_timeout_starts_the_preemptor_only_after_the_kill(resource_group, vcluster_hpc, node_gpu_a,
                                                                       make_allocation, agents):
    low = _job(make_allocation, vcluster_hpc, 2)
    agents.step(schedule_pass, resource_group.pk)
    high = _job(make_allocation, vcluster_hpc, 7)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(low) == "checkpointing"

    timed_out = low.deadline_at + timedelta(seconds=1)  # the application never answers
    agents.step(sweep, now=timed_out)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "pending"  # the victim still runs: terminate is only SIGTERM
    agents.step(sweep, now=timed_out + timedelta(seconds=20))
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "pending"

    agents.step(sweep, now=timed_out + timedelta(seconds=40))  # past the grace: killed
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "running"
    assert agents.violations == []
    assert ("gpu-a", str(high.pk)) in agents.starts


def test_a_checkpoint_timeout_whose_victim_exits_in_the_grace_frees_its_node_then(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, agents):
    low = _job(make_allocation, vcluster_hpc, 2)
    agents.step(schedule_pass, resource_group.pk)
    high = _job(make_allocation, vcluster_hpc, 7)
    agents.step(schedule_pass, resource_group.pk)
    low.refresh_from_db()
    timed_out = low.deadline_at + timedelta(seconds=1)
    agents.step(sweep, now=timed_out)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "pending"
    agents.step(agents.exit, "gpu-a", low, code=-15, reason="terminated", now=timed_out + timedelta(seconds=3))
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "running" and agents.violations == []


def test_a_force_preempted_job_that_times_out_frees_its_node_only_when_gone(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, operator, agents):
    first = _job(make_allocation, vcluster_hpc, 2)
    agents.step(schedule_pass, resource_group.pk)
    waiting = _job(make_allocation, vcluster_hpc, 2)  # same class: it waits, it does not preempt
    agents.step(schedule_pass, resource_group.pk)
    agents.step(allocation_force_preempt, allocation=first, actor=operator, reason="maintenance")
    assert _state(first) == "checkpointing"

    timed_out = Allocation.objects.get(pk=first.pk).deadline_at + timedelta(seconds=1)
    agents.step(sweep, now=timed_out)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(waiting) == "pending"
    agents.step(sweep, now=timed_out + timedelta(seconds=40))
    agents.step(schedule_pass, resource_group.pk)
    assert _state(waiting) == "running" and agents.violations == []


def test_a_victim_losing_one_of_its_nodes_is_killed_on_the_others_before_they_are_reused(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents):
    t0 = timezone.now()
    seq = itertools.count(1)

    def heartbeat(name: str, at: datetime) -> None:
        node_heartbeat(node=Node.objects.get(name=name), frame=Heartbeat(id=f"h{next(_ids)}", seq=next(seq),
                                                                         running=[]), now=at)

    for node in two_nodes:
        heartbeat(node.name, t0)
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(wide) == "running"
    high = _job(make_allocation, vcluster_hpc, 7)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(wide) == "checkpointing"
    [held] = high.placements.values_list("node__name", flat=True)
    silent = next(n.name for n in two_nodes if n.name != held)

    # The node the preemptor does not hold falls silent; the one it holds keeps beating.
    for seconds in (31, 95):
        heartbeat(held, t0 + timedelta(seconds=seconds))
        agents.step(node_liveness_sweep, now=t0 + timedelta(seconds=seconds))
        agents.step(schedule_pass, resource_group.pk)
    assert Node.objects.get(name=silent).state == "down"
    assert agents.violations == []
    if _state(high) == "pending":  # the victim may still be leaving the held node: let it
        agents.step(agents.exit, held, wide, code=-9, reason="killed", now=t0 + timedelta(seconds=96))
        agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "running" and agents.violations == []
    assert _state(wide) == "failed"


def _stopped(agents, alloc, stop: str) -> datetime:
    """Cancel ``alloc`` or let its ten-minute walltime pass; it is terminating. Returns when."""
    alloc.refresh_from_db()
    at = alloc.started_at + timedelta(minutes=10)
    if stop == "cancel":
        agents.step(allocation_cancel, allocation=alloc, actor=None)
    else:
        agents.step(sweep, now=at)
    assert _state(alloc) == "terminating"
    return at


@pytest.mark.parametrize("stop", ["cancel", "walltime"])
def test_work_cancelled_or_past_its_walltime_frees_its_node_only_when_gone(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, agents, stop):
    first = _job(make_allocation, vcluster_hpc, 2, walltime_minutes=10)
    agents.step(schedule_pass, resource_group.pk)
    waiting = _job(make_allocation, vcluster_hpc, 2)  # same class: it waits, it does not preempt
    agents.step(schedule_pass, resource_group.pk)
    _stopped(agents, first, stop)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(waiting) == "pending"  # terminate is only SIGTERM: it may still run
    deadline = Allocation.objects.get(pk=first.pk).deadline_at
    agents.step(sweep, now=deadline + timedelta(seconds=1))  # past the grace: killed
    agents.step(schedule_pass, resource_group.pk)
    assert _state(waiting) == "running" and agents.violations == []
    assert _state(first) == ("cancelled" if stop == "cancel" else "failed")


@pytest.mark.parametrize("stop", ["cancel", "walltime"])
def test_work_on_two_nodes_frees_each_only_as_its_process_there_is_gone(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents, stop):
    """Each node's agent reports the exit of its own process. The first report freed both nodes
    (the allocation ended) while the other node's process was still leaving, and the pass started
    the waiting job beside it. Now the first frees its node alone; the allocation ends with the last."""
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2, walltime_minutes=10)
    agents.step(schedule_pass, resource_group.pk)
    waiting = _job(make_allocation, vcluster_hpc, 2)
    agents.step(schedule_pass, resource_group.pk)
    at = _stopped(agents, wide, stop)
    first, second = "gpu-a", "gpu-b"
    agents.step(agents.exit, first, wide, code=-15, reason="terminated", now=at + timedelta(seconds=1))
    agents.step(agents.exit, first, wide, code=-15, reason="terminated", now=at + timedelta(seconds=1))  # again
    assert _state(wide) == "terminating"
    assert list(wide.placements.values_list("node__name", flat=True)) == [second]
    agents.step(schedule_pass, resource_group.pk)  # the freed node takes the waiting job
    assert _state(waiting) == "running" and agents.violations == []
    assert list(waiting.placements.values_list("node__name", flat=True)) == [first]
    agents.step(agents.exit, second, wide, code=-15, reason="terminated", now=at + timedelta(seconds=2))
    assert _state(wide) == ("cancelled" if stop == "cancel" else "failed")
    assert not wide.placements.exists() and agents.violations == []


def test_running_work_on_two_nodes_whose_process_fails_on_one_stops_on_the_other_before_it_is_reused(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents):
    """A rank of a two-node job fails. The first exit ended the job and freed both nodes with no
    word to the other node's agent: its process ran on beside whatever was placed there next. Now
    the failed node is freed, the other process is told to terminate and keeps its node until gone."""
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2, requeue_policy="on_node_failure")
    agents.step(schedule_pass, resource_group.pk)
    waiting = [_job(make_allocation, vcluster_hpc, 2) for _ in range(2)]
    now = timezone.now()
    agents.step(agents.exit, "gpu-a", wide, code=1, reason="failed", now=now)
    wide.refresh_from_db()
    assert wide.state == "terminating" and wide.fail_reason == "exited on gpu-a: failed (1)"
    assert list(wide.placements.values_list("node__name", flat=True)) == ["gpu-b"]
    assert agents.sent[-1] == ("gpu-b", "terminate", str(wide.pk))
    agents.step(schedule_pass, resource_group.pk)
    assert sorted(_state(w) for w in waiting) == ["pending", "running"]  # gpu-a only
    assert agents.violations == []

    agents.step(agents.exit, "gpu-b", wide, code=-15, reason="terminated", now=now + timedelta(seconds=2))
    wide.refresh_from_db()
    assert wide.state == "failed" and wide.events.latest("id").reason == (
        "exited on gpu-a: failed (1); exited: terminated (-15)")
    assert wide.exit_code == 1  # the failed process's, not the one stopped for it
    assert not Allocation.objects.filter(requeued_from=wide).exists()  # a failed process, not a lost node
    agents.step(schedule_pass, resource_group.pk)
    assert [_state(w) for w in waiting] == ["running", "running"] and agents.violations == []


def test_running_work_on_two_nodes_completes_when_its_last_process_does(resource_group, vcluster_hpc, two_nodes,
                                                                         make_allocation, agents):
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    now = timezone.now()
    agents.step(agents.exit, "gpu-b", wide, code=0, reason="completed", now=now)
    assert _state(wide) == "running"  # gpu-a's process still runs
    assert list(wide.placements.values_list("node__name", flat=True)) == ["gpu-a"]
    agents.step(agents.exit, "gpu-a", wide, code=0, reason="completed", now=now + timedelta(seconds=1))
    assert _state(wide) == "completed" and not wide.placements.exists()


def test_a_checkpointing_victim_on_two_nodes_whose_process_fails_on_one_is_killed_on_the_other_first(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents):
    """A rank of a two-node victim dies while checkpointing. The exit failed the victim and freed
    both nodes with no word to the other node's agent: its process ran on while the preemptor
    started there. Now the failed node is freed, the other process is killed and keeps its node
    until gone; the victim ends failed as a failed checkpoint."""
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    high = _job(make_allocation, vcluster_hpc, 7, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    assert _state(wide) == "checkpointing"
    now = timezone.now()
    agents.step(agents.exit, "gpu-a", wide, code=1, reason="failed", now=now)
    wide.refresh_from_db()
    assert wide.state == "terminating"
    assert list(wide.placements.values_list("node__name", flat=True)) == ["gpu-b"]
    assert agents.sent[-1] == ("gpu-b", "kill", str(wide.pk))
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "pending" and agents.violations == []

    agents.step(agents.exit, "gpu-b", wide, code=-9, reason="killed", now=now + timedelta(seconds=1))
    wide.refresh_from_db()
    assert wide.state == "failed" and wide.events.latest("id").reason.startswith(
        "checkpoint failed: exited on gpu-a: failed (1)")
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "running" and agents.violations == []


def test_a_checkpointing_victim_on_two_nodes_whose_process_completes_on_one_keeps_the_other(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents):
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    high = _job(make_allocation, vcluster_hpc, 7, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    now = timezone.now()
    agents.step(agents.exit, "gpu-b", wide, code=0, reason="completed", now=now)
    assert _state(wide) == "checkpointing"  # gpu-a's process is still saving its checkpoint
    assert list(wide.placements.values_list("node__name", flat=True)) == ["gpu-a"]
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "pending" and agents.violations == []
    agents.step(agents.exit, "gpu-a", wide, code=0, reason="completed", now=now + timedelta(seconds=1))
    assert _state(wide) == "completed"
    agents.step(schedule_pass, resource_group.pk)
    assert _state(high) == "running" and agents.violations == []


def test_work_on_two_nodes_failed_on_one_ends_failed_though_the_other_then_exits_0(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents):
    """The last node's exit 0 in the grace ended the work completed, whichever failure came first:
    a job with a failed rank was recorded as having done its work (the end depended on the order
    the reports came in)."""
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    now = timezone.now()
    agents.step(agents.exit, "gpu-a", wide, code=3, reason="failed", now=now)
    agents.step(agents.exit, "gpu-b", wide, code=0, reason="completed", now=now + timedelta(seconds=1))
    wide.refresh_from_db()
    assert wide.state == "failed" and wide.exit_code == 3  # never failed with exit code 0
    assert wide.events.latest("id").reason == "exited on gpu-a: failed (3); exited: completed (0)"
    assert not wide.placements.exists()


def test_work_on_two_nodes_failed_on_one_then_cancelled_ends_cancelled_though_the_other_then_exits_0(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents):
    """A cancel of work already failing for a failed process: it ends cancelled, and the other
    process's exit 0 in the grace does not make the failed work completed."""
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    now = timezone.now()
    agents.step(agents.exit, "gpu-a", wide, code=3, reason="failed", now=now)
    assert Allocation.objects.get(pk=wide.pk).leaving == "rank_failed"
    agents.step(allocation_cancel, allocation=wide, actor=None)
    assert Allocation.objects.get(pk=wide.pk).leaving == "rank_failed_cancel"
    agents.step(agents.exit, "gpu-b", wide, code=0, reason="completed", now=now + timedelta(seconds=1))
    wide.refresh_from_db()
    assert wide.state == "cancelled" and not wide.placements.exists()


def test_a_node_freed_by_one_process_asks_for_a_pass(resource_group, vcluster_hpc, two_nodes, make_allocation,
                                                      agents, monkeypatch):
    """The freed node may take waiting work at once, not at the next periodic pass."""
    asked: list[int] = []
    monkeypatch.setattr(partial_exits, "request_pass_on_commit", asked.append)
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    agents.step(agents.exit, "gpu-b", wide, code=0, reason="completed", now=timezone.now())
    assert asked == [resource_group.pk] and _state(wide) == "running"


@pytest.mark.parametrize("phase", ["running", "checkpointing"])
def test_work_whose_process_fails_on_one_node_is_announced_terminating(
        resource_group, vcluster_hpc, two_nodes, make_allocation, agents, monkeypatch, phase):
    """Every other way into terminating tells the live feed (and so the job's page); this one did
    not, and watchers saw the work running until it ended."""
    heard: list[tuple[str, dict[str, Any], int | None]] = []
    monkeypatch.setattr(dispatch, "events_on_commit", heard.extend)
    wide = _job(make_allocation, vcluster_hpc, 2, nodes=2)
    agents.step(schedule_pass, resource_group.pk)
    if phase == "checkpointing":
        _job(make_allocation, vcluster_hpc, 7, nodes=2)
        agents.step(schedule_pass, resource_group.pk)
    assert _state(wide) == phase
    heard.clear()
    agents.step(agents.exit, "gpu-a", wide, code=1, reason="failed", now=timezone.now())
    assert _state(wide) == "terminating"
    assert ("allocation.state", {"allocation": wide.pk, "state": "terminating"}, wide.tenant_id) in heard
