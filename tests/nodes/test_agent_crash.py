"""The agent killed (SIGKILL) inside the window between spawning a job's process and recording it
in its state file, through a real Daphne, real agent processes and a real job: the restarted agent
must take the process back (or carry out the start it had not), so that the job runs once, on its
GPUs alone, and its exit is reported once. Before, the restarted agent knew nothing of the process
still running: its hello did not list the work, the control plane sent the start again, and a
second copy ran beside the first on the same GPUs. Needs PostgreSQL and Redis (test_end_to_end)."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from nodes.actions import agent_token_issue
from scheduling.models import Allocation, AllocationEvent
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_an_agent_killed_right_after_a_spawn_takes_the_job_back_and_never_runs_it_twice(
        tmp_path, resource_group, vcluster_hpc, node_gpu_a, make_allocation, agent_factory):
    nodes = type(node_gpu_a).objects
    token = agent_token_issue(node=node_gpu_a)
    first = agent_factory(token, module="tests.nodes.crashing_agent")  # dies right after its first spawn
    wait_for(lambda: nodes.get(pk=node_gpu_a.pk).last_heartbeat_at, 30, "the agent's hello")
    runs, go = tmp_path / "runs", tmp_path / "go"
    script = (f"import os, time\nopen({str(runs)!r}, 'a').write(os.environ['CUDA_VISIBLE_DEVICES'] + '\\n')\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.1)\n")
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                          command=[sys.executable, "-c", script])
    schedule_pass(resource_group.pk)
    try:
        assert first.wait(timeout=30) == -signal.SIGKILL
        wait_for(runs.exists, 30, "the job to run, its agent gone")
        last_heard = nodes.get(pk=node_gpu_a.pk).last_heartbeat_at
        agent_factory(token)
        wait_for(lambda: nodes.get(pk=node_gpu_a.pk).last_heartbeat_at > last_heard, 60, "the new agent's hello")
        # What the hello's reply makes the agent do (before: the start sent again, a second copy).
        wait_for(lambda: AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").exists(),
                 30, "the job's start to be reported")
        time.sleep(2)
        job.refresh_from_db()
        assert job.state == "running"
        assert len(runs.read_text().splitlines()) == 1  # one copy on the node's GPUs
        assert not Allocation.objects.filter(requeued_from=job).exists()
    finally:
        go.write_text("")  # every copy ends
    wait_for(lambda: Allocation.objects.get(pk=job.pk).state == "completed", 30, "the job's exit")
    assert len(runs.read_text().splitlines()) == 1
    assert AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").count() == 1
    assert not AllocationEvent.objects.filter(allocation=job, to_state="failed").exists()
    assert AllocationEvent.objects.filter(allocation=job, to_state="completed").count() == 1
