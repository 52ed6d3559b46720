"""The checkpoint protocol end to end, from the application's side: real application processes
under a real agent process, over a real Daphne, submitted through the API, preempted by the
pass, with deadlines kept by the periodic sweep (called here as the beat would).

Three applications answer the checkpoint hint: one slow but reporting progress (it gets its one
50 % extension and is suspended), one deferring past the group's maximum deferral (forced), and
one saying nothing (terminated, failed). Short deadlines come from the group's policy.
Needs PostgreSQL (shared with the Daphne process) and Redis (shared channel layer).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.actions.lifecycle import sweep
from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import _alive, _connected_agent, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# argv: the behaviour on the checkpoint hint. Uses only the helper (no network client).
APP = '''
import os, pathlib, signal, sys, time
from nodes.checkpoint import defer, done, progress
d = pathlib.Path(os.environ["LATTICE_CHECKPOINT_DIR"])
mode = sys.argv[1]
hinted = []
signal.signal(signal.SIGUSR1, signal.SIG_IGN if mode == "silent" else (lambda *_: hinted.append(1)))
(d / "pid").write_text(str(os.getpid()))
while not hinted:
    time.sleep(0.05)
if mode == "slow":  # reports progress until told to finish: past the deadline, within its extension
    step = 0
    while not (d / "finish").exists() and step < 600:
        progress(min(99, step), eta_s=1)
        step += 1
        time.sleep(0.5)
    (d / "state.json").write_text("{}")
    done()
elif mode == "defer":  # asks 4 s twice: 6 s is the group's maximum; then never finishes
    defer(4)
    time.sleep(1)
    defer(4)
    for step in range(1000):
        progress(min(99, step))
        time.sleep(0.5)
time.sleep(600)
'''


def _policy(operator, **fields) -> None:
    ops = Client()
    ops.force_login(operator)
    response = ops.put("/api/v1/resource-groups/rg-main/policy/",
                       {"policy": {"kind": "class_cost", **fields}, "reason": "short checkpoints for the test"},
                       content_type="application/json")
    assert response.status_code == 200, response.content


def _submit(alice: Client, klass: int, command: list[str]) -> int:
    response = alice.post("/api/v1/allocations/", {
        "resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
        "preemption_class": klass, "checkpoint": "auto", "command": command}, content_type="application/json")
    assert response.status_code == 201, response.content
    return int(response.json()["id"])


def _history(alice: Client, pk: int) -> list[dict]:
    response = alice.get(f"/api/v1/allocations/{pk}/events/")
    assert response.status_code == 200
    return response.json()["results"]


def _when(event: dict) -> datetime:
    return datetime.fromisoformat(event["created_at"].replace("Z", "+00:00"))


def _preempt(tmp_path, node, agent_factory, resource_group, tenant,
             mode: str) -> tuple[Client, int, int, Path, datetime]:
    """The app in ``mode`` runs (class 1) and is asked to checkpoint for a class-7 job; also when
    the clock read just before the pass that asked (the checkpoint began after it)."""
    _connected_agent(tmp_path, node, agent_factory)
    app = tmp_path / "checkpointing_app.py"
    app.write_text(APP)
    alice = Client()
    alice.force_login(tenant.memberships.first().user)
    low = _submit(alice, 1, [sys.executable, str(app), mode])
    schedule_pass(resource_group.pk)
    ckpt = tmp_path / "agent" / "checkpoints" / str(low)
    wait_for(lambda: (ckpt / "pid").exists(), 30, "the application to run and wait for the hint")
    high = _submit(alice, 7, [sys.executable, "-c", "pass"])
    before = timezone.now()
    schedule_pass(resource_group.pk)
    assert Allocation.objects.get(pk=low).state == "checkpointing"
    return alice, low, high, ckpt, before


def _sweep_until_it_leaves(pk: int, after_sweep: Callable[[], None] = lambda: None) -> Allocation:
    """Until the victim is gone: suspended, or (timed out) stopped and ended failed once its agent
    reported the exit. A timed-out victim is terminating meanwhile, keeping its nodes."""
    def left() -> Allocation | None:
        sweep()  # the periodic task: deadlines are due about a second apart here
        after_sweep()
        alloc = Allocation.objects.get(pk=pk)
        return alloc if alloc.state not in ("checkpointing", "terminating") else None

    return wait_for(left, 60, "the victim to leave")


def test_a_slow_application_reporting_progress_gets_its_one_extension_and_is_suspended(
        tmp_path, operator, tenant_physics, resource_group, vcluster_hpc, node_gpu_a, agent_factory):
    _policy(operator, checkpoint_timeout_minutes=0.2)  # 12 s
    alice, low, _, ckpt, _ = _preempt(tmp_path, node_gpu_a, agent_factory, resource_group, tenant_physics,
                                        "slow")

    def finish_once_extended() -> None:
        # The application finishes once the sweep has given it its extension (6 s more): whenever
        # the sweep comes, and however late the hint came, its DONE lands past the first deadline.
        if Allocation.objects.get(pk=low).deadline_extended:
            (ckpt / "finish").touch()

    alloc = _sweep_until_it_leaves(low, finish_once_extended)
    assert alloc.state == "pending" and alloc.resume_from_checkpoint and alloc.preempted_count == 1
    assert alloc.deadline_extended and alloc.checkpoint_location == str(ckpt)
    history = _history(alice, low)
    reasons = [e["reason"] for e in history]
    assert "checkpoint deadline extended by 6.0s (responsive, once)" in reasons
    done = next(e for e in history if e["to_state"] == "suspended")
    assert done["reason"].startswith("checkpoint done in ")
    assert float(done["reason"].removeprefix("checkpoint done in ").rstrip("s")) > 12  # past the first deadline
    wait_for(lambda: not _alive(int((ckpt / "pid").read_text())), 30, "the checkpointed process to be stopped")


def test_an_application_deferring_past_the_maximum_is_forced(
        tmp_path, operator, tenant_physics, resource_group, vcluster_hpc, node_gpu_a, agent_factory):
    # 6 s (the first deferral must come within it, after the hint's trip), at most 6 s more
    _policy(operator, checkpoint_timeout_minutes=0.1, max_deferral_minutes=0.1)
    alice, low, _, ckpt, asked = _preempt(tmp_path, node_gpu_a, agent_factory, resource_group, tenant_physics,
                                            "defer")

    alloc = _sweep_until_it_leaves(low)
    assert alloc.state == "failed" and alloc.deferred_seconds == 6 and not alloc.deadline_extended
    history = _history(alice, low)
    reasons = [e["reason"] for e in history]
    assert [r for r in reasons if r.startswith("checkpoint deferral")] == [
        "checkpoint deferral: asked 4s, granted 4s", "checkpoint deferral: asked 4s, granted 2s"]
    assert reasons[-2:] == ["checkpoint timed out after the maximum deferral: stopping",
                            "checkpoint timed out after the maximum deferral; exited: terminated (-15)"]
    # Not stopped before 6 s + 6 s deferred from when the checkpoint began (after ``asked``).
    assert (_when(history[-2]) - asked).total_seconds() >= 12
    wait_for(lambda: not _alive(int((ckpt / "pid").read_text())), 30, "the forced process to be terminated")
    assert not Allocation.objects.filter(requeued_from_id=low).exists()  # requeue policy on_node_failure


def test_an_application_that_says_nothing_is_terminated_and_fails(
        tmp_path, operator, tenant_physics, resource_group, vcluster_hpc, node_gpu_a, agent_factory):
    _policy(operator, checkpoint_timeout_minutes=0.05)  # 3 s
    alice, low, high, ckpt, _ = _preempt(tmp_path, node_gpu_a, agent_factory, resource_group, tenant_physics,
                                           "silent")

    alloc = _sweep_until_it_leaves(low)
    assert alloc.state == "failed" and not alloc.deadline_extended and alloc.checkpoint_progress_at is None
    assert [e["reason"] for e in _history(alice, low)][-2:] == [
        "checkpoint timed out: stopping", "checkpoint timed out; exited: terminated (-15)"]
    wait_for(lambda: not _alive(int((ckpt / "pid").read_text())), 30, "the silent process to be terminated")
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=high).state == "completed", 30, "the class-7 job to run")
