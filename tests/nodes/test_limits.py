"""Per-allocation limits (nodes/cgroups.py): each allocation in its own cgroup v2 child with
``cpu.max`` and ``memory.max`` from its request, an out-of-memory kill reported ``oom`` and
explained on the job page; without cgroups the agent says why in hello and the node page shows it.

The kernel's part (a job past its memory.max is killed) needs a writable cgroup v2 hierarchy with
the memory and cpu controllers: that test runs wherever the probe finds one (CI=true included)
and skips, saying why, where it does not. The agent's own logic is also tested on a directory
laid out as a cgroup v2 mount, which any machine has.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path

import pytest

from nodes import cgroups
from nodes.actions import agent_token_issue, allocation_report
from nodes.agent_run import _options
from nodes.models import Node
from nodes.protocol import Exited
from nodes.runas import prepare
from scheduling.models import Allocation, AllocationEvent
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import wait_for

# 3 GiB written, 64 MiB at a time (pages only count once touched): past a 1 GiB limit.
BIG = "import time\nkept = [b'x' * 2**26 for _ in range(48)]\ntime.sleep(5)"


def _fake_mount(tmp_path: Path, controllers: str = "cpuset cpu io memory pids", own: str = "/svc") -> tuple:
    """A directory laid out as a cgroup v2 mount, with /proc's mounts and self/cgroup pointing at it."""
    mount = tmp_path / "cgroup"
    (mount / own.lstrip("/")).mkdir(parents=True)
    parts = [p for p in own.split("/") if p]
    for path in [mount, *(mount.joinpath(*parts[:n]) for n in range(1, len(parts) + 1))]:
        (path / "cgroup.controllers").write_text(controllers + "\n")
        (path / "cgroup.subtree_control").write_text("")
        (path / "cgroup.procs").write_text("")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\ncgroup2 {mount} cgroup2 rw,nosuid 0 0\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(f"0::{own}\n")
    return mount, mounts, self_cgroup


def test_a_delegated_subtree_gets_its_controllers_and_each_allocation_its_limits(tmp_path):
    mount, mounts, self_cgroup = _fake_mount(tmp_path)
    limiter = cgroups.Limiter.probe(None, mounts=mounts, self_cgroup=self_cgroup)  # default: the agent's own
    assert limiter.root == mount / "svc"
    assert (mount / "svc" / "cgroup.subtree_control").read_text() == "+memory +cpu"
    child = limiter.make("42", cpu=2, memory_gib=3)
    assert child == mount / "svc" / "alloc-42"
    assert (child / "cpu.max").read_text() == "200000 100000"  # two CPUs: 200 ms per 100 ms
    assert (child / "memory.max").read_text() == str(3 * 2**30)
    unlimited = limiter.make("43", cpu=0, memory_gib=0)
    assert (unlimited / "cpu.max").read_text() == "max 100000" and (unlimited / "memory.max").read_text() == "max"
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cgroups.oom_kills(child) == 1 and cgroups.oom_kills(unlimited) == 0
    # The launcher enters the cgroup before it runs the command.
    launch = prepare({"command": ["true"], "env": {}}, None, "42", tmp_path / "ck", tmp_path, tmp_path / "x", cgroup=child)
    options = launch.argv[3:launch.argv.index("--")]
    assert _options(options) == {"cgroup": str(child)}


def test_an_agent_already_in_its_leaf_limits_beside_it(tmp_path):
    mount, mounts, self_cgroup = _fake_mount(tmp_path, own="/svc/agent")  # systemd's DelegateSubgroup=agent
    assert cgroups.Limiter.probe(None, mounts=mounts, self_cgroup=self_cgroup).root == mount / "svc"


@pytest.mark.parametrize(("controllers", "own", "words"), [
    ("cpuset io pids", "/svc", r"cpu and memory controller\(s\) are not available"),
    ("cpu io memory", "/", "runs in the root cgroup"),
])
def test_without_a_usable_subtree_the_probe_says_why(tmp_path, controllers, own, words):
    _, mounts, self_cgroup = _fake_mount(tmp_path, controllers, own)
    with pytest.raises(cgroups.Unavailable, match=words):
        cgroups.Limiter.probe(None, mounts=mounts, self_cgroup=self_cgroup)
    v1_only = tmp_path / "v1"
    v1_only.write_text("cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n")
    with pytest.raises(cgroups.Unavailable, match="no cgroup v2"):
        cgroups.Limiter.probe(None, mounts=v1_only, self_cgroup=self_cgroup)
    with pytest.raises(cgroups.Unavailable, match="not under the cgroup v2 mount"):
        cgroups.Limiter.probe(str(tmp_path / "elsewhere"), mounts=mounts, self_cgroup=self_cgroup)


@pytest.fixture
def real_cgroup_root():
    """A subtree of this machine's cgroup v2 hierarchy for the test, removed afterwards; skipped,
    with the probe's reason, where the machine has none the agent could use."""
    name = f"lattice-test-{uuid.uuid4().hex[:8]}"
    try:
        limiter = cgroups.Limiter.probe(name)
    except cgroups.Unavailable as exc:
        pytest.skip(f"this machine cannot limit allocations with cgroup v2: {exc}")
    yield str(limiter.root)
    for child in sorted(limiter.root.glob("alloc-*")):
        cgroups.remove(child)
    with contextlib.suppress(OSError):
        limiter.root.rmdir()


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_job_past_its_memory_limit_is_reported_oom_and_explained(
        real_cgroup_root, client, operator, resource_group, vcluster_hpc, node_gpu_a, make_allocation,
        agent_factory):
    agent_factory(agent_token_issue(node=node_gpu_a), env={"LATTICE_CGROUP_ROOT": real_cgroup_root})
    wait_for(lambda: Node.objects.get(pk=node_gpu_a.pk).cgroups is True, 30, "the agent's hello with cgroups")
    job = make_allocation(state="pending", node_count=1, per_node_gpu=1, per_node_cpu=1, per_node_memory=1,
                          vcluster=vcluster_hpc, command=[sys.executable, "-c", BIG])
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=job.pk).state == "failed", 60, "the job to be killed")
    assert AllocationEvent.objects.filter(allocation=job, reason__startswith="exited: oom").exists()
    client.force_login(operator)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "more memory than it asked for: 1 GiB per node" in page


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_an_agent_without_cgroups_says_why_and_the_node_page_shows_it(tmp_path, client, operator, node_gpu_a,
                                                                     agent_factory):
    # A root outside any cgroup hierarchy: refused on every machine, with the reason.
    agent_factory(agent_token_issue(node=node_gpu_a), env={"LATTICE_CGROUP_ROOT": str(tmp_path / "not-a-cgroup")})
    node = wait_for(lambda: Node.objects.filter(pk=node_gpu_a.pk, cgroups=False).first(), 30, "the agent's hello")
    assert node.cgroups_note
    client.force_login(operator)
    page = client.get("/ops/nodes/gpu-a/").content.decode()
    assert "allocations are not limited" in page and node.cgroups_note.split(":")[0] in page


@pytest.mark.django_db
def test_an_oom_exit_fails_the_job_and_its_page_says_why(client, node_gpu_a, make_allocation, vcluster_hpc,
                                                         tenant_physics):
    job = make_allocation(state="pending", node_count=1, per_node_gpu=1, per_node_memory=16, vcluster=vcluster_hpc)
    schedule_pass(job.resource_group_id)
    assert allocation_report(node=node_gpu_a, frame=Exited(id="e1", allocation=str(job.pk), exit_code=-9,
                                                           reason="oom"))
    assert Allocation.objects.get(pk=job.pk).state == "failed"
    client.force_login(tenant_physics.memberships.first().user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="exit-why"' in page and "16 GiB per node" in page
    other = make_allocation(state="pending", node_count=1, per_node_gpu=1, vcluster=vcluster_hpc)
    schedule_pass(job.resource_group_id)
    allocation_report(node=node_gpu_a, frame=Exited(id="e2", allocation=str(other.pk), exit_code=1, reason="failed"))
    assert 'id="exit-why"' not in client.get(f"/jobs/{other.pk}/").content.decode()  # nothing to explain
