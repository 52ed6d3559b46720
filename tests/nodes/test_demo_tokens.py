"""The demo's simulated fleet (``run_agent --simulate-all``, started by every ``make run``) gives
each node's simulated agent a fresh token and revokes only the ones it gave before: a token an
operator issued by hand for a real agent keeps working across demo restarts."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from nodes.actions import agent_token_issue
from nodes.management.commands import run_agent
from nodes.models import AgentToken
from tests.nodes.conftest import authenticated

pytestmark = pytest.mark.django_db


def _simulate_all(monkeypatch, workdir) -> str:
    """One demo start, its agents not run: the token its agent for gpu-a was given."""
    fleet = []

    async def keep(agents):
        fleet.extend(agents)

    monkeypatch.setattr(run_agent, "_run_all", keep)
    call_command("run_agent", "--simulate-all", "--workdir", str(workdir), stdout=io.StringIO())
    [agent] = fleet
    return str(agent.token)


def test_a_demo_restart_replaces_only_its_own_agents_tokens(node_gpu_a, monkeypatch, tmp_path):
    by_hand = agent_token_issue(node=node_gpu_a)
    first = _simulate_all(monkeypatch, tmp_path)
    assert authenticated(first) == node_gpu_a
    second = _simulate_all(monkeypatch, tmp_path)
    assert authenticated(second) == node_gpu_a
    assert authenticated(first) is None  # the earlier demo's agent is replaced
    assert authenticated(by_hand) == node_gpu_a  # the hand-issued token still works


@pytest.mark.parametrize("url", ["ws://127.0.0.1:99999/ws/agent/", "http://127.0.0.1:8000/ws/agent/"])
def test_a_fleet_url_that_cannot_work_is_refused_before_any_token_is_given(node_gpu_a, tmp_path, url):
    """A port past 65535 was a traceback in every simulated agent, after each node's token was
    replaced; now the command stops first, as the agent program does (exit 2)."""
    with pytest.raises(CommandError, match="is not a ws:// or wss:// URL") as refused:
        call_command("run_agent", "--simulate-all", "--url", url, "--workdir", str(tmp_path), stdout=io.StringIO())
    assert refused.value.returncode == 2
    assert not AgentToken.objects.exists()
