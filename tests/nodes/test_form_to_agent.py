"""A job submitted through the portal's form, not the API: placed by the pass, started by a real
agent over the socket with the words the form split from the command line (quotes kept as a
shell would, no shell run), its exit reported back, and its history and job page saying so."""

from __future__ import annotations

import sys

import pytest

from nodes.actions import agent_token_issue
from scheduling.models import Allocation, AllocationEvent
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_a_job_from_the_submit_form_runs_on_a_real_agent_with_its_words(
        tmp_path, client, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, agent_factory):
    agent_factory(agent_token_issue(node=node_gpu_a))
    wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at, 30, "the agent's hello")
    out = tmp_path / "argv"
    script = f"import sys; open({str(out)!r}, 'w').write(repr(sys.argv[1:]))"
    # One word with spaces in double quotes, one with a double quote inside single quotes, and a
    # shell's operators that are only words here (no shell runs the command).
    command = f"{sys.executable} -c \"{script}\" 'two words' 'say \"hi\"' '$HOME' ';' 'rm -rf /'"
    client.force_login(tenant_physics.memberships.first().user)
    page = client.post("/jobs/new/", {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1,
                                      "gpus_per_node": 1, "preemption_class": 3, "checkpoint": "none",
                                      "command": command, "action": "submit"})
    assert page.status_code == 302, page.content.decode()[:2000]
    job = Allocation.objects.get(tenant=tenant_physics)
    assert page["Location"] == f"/jobs/{job.pk}/"

    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=job.pk).state == "completed", 30, "the job to run and end")
    assert out.read_text() == repr(["two words", 'say "hi"', "$HOME", ";", "rm -rf /"])
    reasons = list(AllocationEvent.objects.filter(allocation=job).order_by("id").values_list("reason", flat=True))
    assert any(r.startswith("exited: completed") for r in reasons), reasons
    shown = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "completed" in shown and "&#x27;two words&#x27;" in shown  # the command shown back, quoted
