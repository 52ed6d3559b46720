"""The agent's connection: how long it waits before trying again, what it does when its token is
revoked (4401) or another agent holds its node (4409), and what it leaves on a job's environment.
The close codes are checked with the real agent program against a real Daphne."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from nodes import agent as agent_module
from nodes.actions import agent_token_issue, agent_token_revoke, agent_token_simulated
from nodes.agent import Agent
from tests.conftest import ROOT
from tests.nodes.conftest import ROOT_LEAVE
from tests.nodes.test_end_to_end import control_plane, daphne, wait_for  # noqa: F401 (fixtures)


def _delays(monkeypatch, tmp_path, sessions: list[tuple[int | None, bool]], **kwargs) -> tuple[int, list[float]]:
    """Runs the agent's loop over scripted sessions (close code, welcomed?); the waits it chose
    between them (no jitter), and what run() returned."""
    agent = Agent("ws://unused/", "t", tmp_path, **kwargs)
    waits: list[float] = []
    script = iter(sessions)

    async def session() -> int | None:
        try:
            code, agent.welcomed = next(script)
        except StopIteration:
            agent.stopping.set()
            return None
        return code

    async def wait_for_stop(awaitable, timeout):
        awaitable.close()
        waits.append(timeout)
        raise TimeoutError

    monkeypatch.setattr(agent, "_session", session)
    monkeypatch.setattr(agent_module.random, "random", lambda: 1.0)
    monkeypatch.setattr(agent_module.asyncio, "wait_for", wait_for_stop)
    code = asyncio.run(agent.run())
    return code, waits


def test_the_backoff_grows_across_connections_that_are_never_welcomed(monkeypatch, tmp_path):
    """A handshake the server accepts and then closes is no success: only a welcome resets the wait."""
    sessions = [(1011, False)] * 6 + [(1006, True), (None, False)]
    code, waits = _delays(monkeypatch, tmp_path, sessions)
    assert code == 0
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 1.0, 2.0]


def test_a_revoked_token_stops_the_agent_with_exit_3_unless_told_to_retry(monkeypatch, tmp_path):
    code, waits = _delays(monkeypatch, tmp_path, [(1006, False), (4401, False), (1006, False)])
    assert (code, waits) == (3, [1.0])
    code, waits = _delays(monkeypatch, tmp_path, [(4401, False), (4401, False)], retry_revoked=True)
    assert (code, waits) == (0, [agent_module.LONG_BACKOFF_S] * 2)


def test_a_node_held_by_another_agent_means_a_long_wait(monkeypatch, tmp_path):
    code, waits = _delays(monkeypatch, tmp_path, [(4409, True), (1006, False)])
    assert waits == [agent_module.LONG_BACKOFF_S, 1.0]


def test_nothing_of_lattice_goes_on_a_jobs_pythonpath(monkeypatch, tmp_path):
    """A tenant's job gets the environment it was given: not Lattice's checkout, not its own
    working directory by way of an empty entry."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "seen"

    async def scenario() -> None:
        agent = Agent("ws://unused/", "t", tmp_path)
        agent.ws = None
        code = f"import os, sys; open({str(out)!r}, 'w').write(repr(os.environ.get('PYTHONPATH')))"
        await agent.handle({"type": "start", "allocation": "9", "command": [sys.executable, "-c", code], "env": {},
                            "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": "checkpoints/9",
                            **ROOT_LEAVE})
        await agent.running["9"].task

    asyncio.run(scenario())
    assert out.read_text() == "None"


# -- the real program against a real Daphne ----------------------------------------------------------

def real(test):
    """Needs the Daphne of test_end_to_end, on PostgreSQL and Redis shared with this process."""
    return pytest.mark.postgres(pytest.mark.redis(pytest.mark.django_db(transaction=True)(test)))


def _agent(tmp_path, port: int, token: str, name: str, *extra: str) -> tuple[subprocess.Popen, object]:
    token_file = tmp_path / f"{name}.token"
    token_file.write_text(token)
    log = (tmp_path / f"{name}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "nodes.agent", "--url", f"ws://127.0.0.1:{port}/ws/agent/",
                             "--token-file", str(token_file), "--workdir", str(tmp_path / name), "--simulate", *extra],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return proc, tmp_path / f"{name}.log"


@real
def test_a_revoked_agent_exits_3_saying_why(tmp_path, node_gpu_a, daphne):  # noqa: F811
    token = agent_token_issue(node=node_gpu_a)
    agent_token_revoke(node=node_gpu_a)
    proc, log = _agent(tmp_path, daphne, token, "revoked")
    try:
        assert proc.wait(timeout=20) == 3
    finally:
        proc.kill()
    assert "token was revoked" in log.read_text()


@real
def test_a_token_revoked_while_connected_stops_the_agent_unless_told_to_retry(tmp_path, node_gpu_a,
                                                                           daphne):  # noqa: F811
    def greeted_since(moment):
        return lambda: (type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at or moment) > moment

    from django.utils import timezone

    stops, _ = _agent(tmp_path, daphne, agent_token_issue(node=node_gpu_a), "stops")
    retries = None
    try:
        wait_for(greeted_since(timezone.now()), 30, "the first agent's hello")
        agent_token_revoke(node=node_gpu_a)
        assert stops.wait(timeout=20) == 3
        started = timezone.now()
        retries, retries_log = _agent(tmp_path, daphne, agent_token_issue(node=node_gpu_a), "retries",
                                      "--retry-revoked")
        wait_for(greeted_since(started), 30, "the second agent's hello")
        agent_token_revoke(node=node_gpu_a)
        wait_for(lambda: "(4401)" in retries_log.read_text(), 20, "the retrying agent to be closed")
        time.sleep(2)
        assert retries.poll() is None  # still there, waiting minutes before its next try
    finally:
        for proc in (stops, retries):
            if proc is not None:
                proc.kill()
                proc.wait(timeout=10)


@real
def test_a_simulated_agent_s_token_revoked_leaves_a_real_agent_with_its_own_token_connected(tmp_path, node_gpu_a,
                                                                                           daphne):  # noqa: F811
    """``make run`` replaces its simulated agents' tokens at each start; a real agent on the same node,
    connected with a token issued by hand, is not closed by that, in another process than the one
    that revoked."""
    def greeted_since(moment):
        return lambda: (type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at or moment) > moment

    from django.utils import timezone

    simulated, simulated_log = _agent(tmp_path, daphne, agent_token_simulated(node=node_gpu_a), "simulated",
                                      "--retry-revoked")
    wait_for(greeted_since(timezone.now()), 30, "the simulated agent's hello")
    simulated.kill()
    simulated.wait(timeout=10)
    real_agent, real_log = _agent(tmp_path, daphne, agent_token_issue(node=node_gpu_a), "by-hand")
    try:
        wait_for(greeted_since(timezone.now()), 30, "the real agent's hello")
        agent_token_simulated(node=node_gpu_a)  # the demo starting again
        revoked = timezone.now()
        time.sleep(2)
        # Heartbeats go on after the revocation: the connection stayed, and nothing made it close.
        wait_for(greeted_since(revoked), 30, "a heartbeat after the revocation")
        assert real_agent.poll() is None
        assert "(4401)" not in real_log.read_text() and "revoked" not in real_log.read_text()
        agent_token_revoke(node=node_gpu_a)  # every token: now it is closed
        assert real_agent.wait(timeout=20) == 3
    finally:
        if real_agent.poll() is None:
            real_agent.kill()
            real_agent.wait(timeout=10)


@real
def test_two_agents_for_one_node_do_not_replace_each_other_in_a_loop(tmp_path, node_gpu_a, daphne):  # noqa: F811
    token = agent_token_issue(node=node_gpu_a)
    first, first_log = _agent(tmp_path, daphne, token, "first")
    wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at, 30, "the first hello")
    second, second_log = _agent(tmp_path, daphne, token, "second")
    try:
        wait_for(lambda: "another agent holds this node" in first_log.read_text(), 20, "the first to be replaced")
        time.sleep(6)  # the old loop replaced one with the other every second or so
        logs = first_log.read_text() + second_log.read_text()
        assert logs.count("another agent holds this node") == 1, logs
        assert first.poll() is None and second.poll() is None
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait(timeout=10)
