"""Work whose tenant maps no Unix user, on a node whose agent runs as root, through the running
system: submitted over the API, placed by the pass, sent to a real agent over the socket, which
refuses it (it would run as root) and says so; the history and the job page say why. Once the
operator allows root for the tenant, the same work runs. On a node whose agent runs as an ordinary
user, the same work is refused whatever the tenant's leave (it would run as the agent)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from nodes.actions import agent_token_issue
from scheduling.models import Allocation, AllocationEvent, Tenant
from scheduling.passes.run import schedule_pass
from tests.conftest import ROOT
from tests.nodes.test_end_to_end import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _refused(alice, body, resource_group, ran: Path) -> str:
    """Submit ``body`` as alice, run the pass, and wait for the agent to refuse it: the refusal in
    the history, nothing run (``ran`` not written); returns the job page."""
    refused = alice.post("/api/v1/allocations/", body, content_type="application/json").json()["id"]
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=refused).state == "failed", 30, "the agent's refusal")
    assert AllocationEvent.objects.filter(allocation_id=refused, reason__startswith="exited: refused").exists()
    assert not ran.exists()
    return str(alice.get(f"/jobs/{refused}/").content.decode())


def test_unmapped_work_is_refused_by_a_root_agent_until_the_tenant_may_run_as_root(
        tmp_path, api_for, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, agent_factory):
    if os.geteuid() != 0:
        pytest.skip("the agent runs as root only when the test does")
    Tenant.objects.filter(pk=tenant_physics.pk).update(allow_root=False, unix_user="")
    agent_factory(agent_token_issue(node=node_gpu_a))
    wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at, 30, "the agent's hello")
    ran = tmp_path / "ran"
    alice = api_for("alice")
    body = {"resource_group": resource_group.name, "vcluster": "hpc", "per_node": {"gpu": 1},
            "command": [sys.executable, "-c", f"open({str(ran)!r}, 'a').write('ran')"]}

    page = _refused(alice, body, resource_group, ran)
    assert "it would have run as root" in page and "allow root for the tenant" in page
    assert "--unmapped-as-agent" in page  # the remedy where an agent not running as root refused it

    Tenant.objects.filter(pk=tenant_physics.pk).update(allow_root=True)  # the operator's leave
    allowed = alice.post("/api/v1/allocations/", body, content_type="application/json").json()["id"]
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=allowed).state == "completed", 30, "the allowed job to run")
    assert ran.read_text() == "ran"


def test_unmapped_work_is_refused_by_an_agent_running_as_an_ordinary_user(
        tmp_path, api_for, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, daphne):
    """The same work on a node whose agent runs as an ordinary user: there it would run as the
    agent, able to read the agent's token, so the agent refuses it even though the tenant may run
    as root, and the job page names the node's remedy. Root is needed to make the user and to
    start the agent as it (tests/nodes/ordinary_agent.py); CI runs as root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a Unix user and start the agent as it")
    Tenant.objects.filter(pk=tenant_physics.pk).update(allow_root=True, unix_user="")
    user = "lat-ag-" + uuid.uuid4().hex[:6]
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", user], check=True)
    home = Path(tempfile.mkdtemp(prefix="lattice-agent-"))
    agent = None
    try:
        entry = pwd.getpwnam(user)
        token = home / "token"
        token.write_text(agent_token_issue(node=node_gpu_a))
        for path in (home, token):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        token.chmod(0o600)
        fake = str(ROOT / "tests" / "nodes" / "fake_nvml")
        agent = subprocess.Popen(
            [sys.executable, "-m", "tests.nodes.ordinary_agent", user, "--", "--url",
             f"ws://127.0.0.1:{daphne}/ws/agent/", "--token-file", str(token), "--workdir", str(home / "work")],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join([fake, str(ROOT)])})
        wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at, 30, "the agent's hello")
        ran = home / "ran"
        body = {"resource_group": resource_group.name, "vcluster": "hpc", "per_node": {"gpu": 1},
                "command": ["/bin/sh", "-c", f"id -u > {ran}"]}
        alice = api_for("alice")
        page = _refused(alice, body, resource_group, ran)
        assert "as the node&#x27;s agent itself" in page and "--unmapped-as-agent" in page
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=10)
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run(["userdel", user], check=False)
