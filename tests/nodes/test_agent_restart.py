"""The agent program across its own restart: what it saved (its processes, their runs, the starts
waiting for GPUs) taken back, with real processes, frames recorded where the socket would carry them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

from nodes import cgroups
from nodes.agent import Agent
from nodes.processes import alive
from nodes.protocol import parse
from tests.nodes.conftest import ROOT_LEAVE
from tests.nodes.test_agent import IGNORES_SIGTERM, Recorder


def _start(alloc: str, code: str) -> dict:
    return {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", code], "env": {},
            "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": f"checkpoints/{alloc}",
            "devices": [{"index": 0, "uuid": "GPU-0"}], "run": 1, **ROOT_LEAVE}


async def _stopping_7_with_8_waiting(workdir) -> None:
    """The agent before its restart: 7 told to terminate (ignoring SIGTERM, a long grace), 8 bound
    to the same GPU and waiting for 7 to leave."""
    agent = Agent("ws://unused/", "token", workdir, simulate=False)
    agent.ws = Recorder()
    await agent.handle(_start("7", IGNORES_SIGTERM))
    await asyncio.sleep(0.5)  # the interpreter is up and ignores SIGTERM
    await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
    await agent.handle(_start("8", "import time; time.sleep(60)"))
    assert set(agent.waiting) == {"8"}


def test_a_process_being_terminated_is_killed_after_the_grace_also_across_the_agent_s_restart(tmp_path, monkeypatch):
    """The kill after a terminate's grace is the agent's own timer. Restarted within the grace, the
    agent must still kill a process that outlives SIGTERM: for a checkpointed victim the control
    plane sends no kill, and a start waiting for its GPUs would otherwise wait for ever."""
    import nodes.agent_commands

    monkeypatch.setattr(nodes.agent_commands, "DEFAULT_GRACE_S", 0.5)

    async def second_agent() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        pid = agent.running["7"].pid
        for _ in range(60):
            if any(f["type"] == "started" for f in agent.ws.frames):
                break
            await asyncio.sleep(0.05)
        for entry in list(agent.running.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry.pid, 9)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, 9)
        return [(f["type"], f["allocation"], f.get("reason")) for f in agent.ws.frames]

    asyncio.run(_stopping_7_with_8_waiting(tmp_path))
    assert asyncio.run(second_agent())[:2] == [("exited", "7", "killed"), ("started", "8", None)]


def test_a_start_restored_after_the_agent_s_restart_runs_within_the_node_s_limits(tmp_path, monkeypatch):
    """A restarted agent starts a waiting start it restored as soon as what held its GPUs is gone,
    which may be before its first hello, where it learns whether the node limits each allocation
    in its own cgroup: the start must be limited all the same."""
    made: list[str] = []

    class Limiter:
        root = tmp_path

        def make(self, alloc: str, cpu: float, memory: float) -> None:
            made.append(alloc)  # (no cgroup made: the process then runs as if unlimited)

    monkeypatch.setattr(cgroups.Limiter, "probe", classmethod(lambda cls, root=None: Limiter()))

    def start(alloc: str, code: str) -> dict:
        return {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", code], "env": {},
                "resources": {"cpu": 1, "memory": 1}, "resume_from_checkpoint": False,
                "checkpoint_dir": f"checkpoints/{alloc}", "devices": [{"index": 0, "uuid": "GPU-0"}], "run": 1,
                **ROOT_LEAVE}

    async def first_agent() -> int:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        agent._probe_limits()
        await agent.handle(start("7", IGNORES_SIGTERM))
        await asyncio.sleep(0.5)
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
        await agent.handle(start("8", "import time; time.sleep(60)"))
        return agent.running["7"].pid

    async def second_agent() -> None:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()  # 7 is gone: 8 starts now
        os.killpg(agent.running["8"].pid, 9)

    seven = asyncio.run(first_agent())
    os.killpg(seven, 9)  # gone while no agent runs
    for _ in range(40):
        if not alive(seven):
            break
        time.sleep(0.05)
    made.clear()
    asyncio.run(second_agent())
    assert made == ["8"]


def test_the_agent_s_state_files_are_its_own(tmp_path):
    """A waiting start is saved with its command and env; the work directory is open to the jobs'
    users (their checkpoint directories are in it): no other user may read what the agent saves."""
    async def scenario() -> None:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle({"type": "start", "allocation": "7", "command": [sys.executable, "-c", IGNORES_SIGTERM],
                            "env": {}, "resources": {}, "resume_from_checkpoint": False,
                            "checkpoint_dir": "checkpoints/7", "devices": [{"index": 0, "uuid": "GPU-0"}], "run": 1,
                            **ROOT_LEAVE})
        await asyncio.sleep(0.5)
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
        await agent.handle({"type": "start", "allocation": "8", "command": ["true"], "env": {"TOKEN": "secret"},
                            "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": "checkpoints/8",
                            "devices": [{"index": 0, "uuid": "GPU-0"}], "run": 1, **ROOT_LEAVE})
        os.killpg(agent.running["7"].pid, 9)

    old = os.umask(0o022)  # as most agents run: files others may read unless made otherwise
    try:
        asyncio.run(scenario())
    finally:
        os.umask(old)
    for name in ("agent-state.json", "agent-waiting.json"):
        assert (tmp_path / name).stat().st_mode & 0o077 == 0, name


def test_a_damaged_state_file_neither_stops_the_agent_nor_makes_its_frames_refused(tmp_path):
    """An entry's numbers may be anything in a damaged or hand-edited file: a pid too large for an
    integer must not end the agent at its start, and a run the control plane refuses must not go
    into its reports and hello (refused, the hello would leave the node's work unreconciled)."""
    (tmp_path / "checkpoints" / "7").mkdir(parents=True)
    (tmp_path / "agent-state.json").write_text(
        '{"7": {"pid": 0, "checkpoint_dir": "%s", "run": -3},'
        ' "8": {"pid": 1e999, "checkpoint_dir": "x"}, "9": {"pid": 0, "checkpoint_dir": "x", "run": 1e999}}'
        % (tmp_path / "checkpoints" / "7"))

    async def scenario() -> list[dict]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        return [*agent.ws.frames, agent._hello()]

    frames = asyncio.run(scenario())
    for frame in frames:
        parse(json.dumps(frame))  # none refused
    assert sorted(f["allocation"] for f in frames if f["type"] == "exited") == ["7", "9"]


def test_a_restored_start_that_fails_neither_stops_the_agent_nor_loses_the_others(tmp_path, monkeypatch):
    """A restarted agent starts the waits it saved before it serves; one it cannot act on (its
    directory cannot be made, say) must not end the agent and take the others with it."""
    from nodes import runas

    prepare = runas.prepare

    def failing(frame: dict, *args: object, **kwargs: object) -> object:
        if frame["allocation"] == "8":
            raise PermissionError("cannot make checkpoints/8")
        return prepare(frame, *args, **kwargs)

    monkeypatch.setattr(runas, "prepare", failing)

    def start(alloc: str) -> dict:
        return {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", "import time; time.sleep(60)"],
                "env": {}, "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": f"checkpoints/{alloc}",
                "devices": [{"index": 0, "uuid": "GPU-0"}], "run": 1, **ROOT_LEAVE}

    (tmp_path / "agent-waiting.json").write_text(json.dumps({"8": start("8"), "9": start("9")}))

    async def restarted() -> list[str]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        started = sorted(agent.running)
        for entry in agent.running.values():
            os.killpg(entry.pid, 9)
        return started

    assert asyncio.run(restarted()) == ["9"]


def test_a_start_waiting_for_gpus_survives_the_agent_s_restart(tmp_path):
    """Restarted while a start waits for a stopping process to leave its GPUs, the agent must
    neither forget the start (its hello would not list it, and the control plane would count the
    work lost) nor start it at once beside the process still leaving, nor forget that process is
    being stopped (its exit is reported as the stop's, terminated)."""
    async def second_agent() -> tuple[list[dict], list[tuple]]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        hello = agent._hello()["running"]
        await asyncio.sleep(0.5)
        assert agent.ws.frames == []  # 8 still waits: 7 holds GPU-0
        os.killpg(agent.running["7"].pid, 9)  # (the kill after the grace)
        for _ in range(100):
            if any(f["type"] == "started" for f in agent.ws.frames):
                break
            await asyncio.sleep(0.05)
        os.killpg(agent.running["8"].pid, 9)
        return hello, [(f["type"], f["allocation"], f.get("reason")) for f in agent.ws.frames]

    asyncio.run(_stopping_7_with_8_waiting(tmp_path))
    hello, frames = asyncio.run(second_agent())
    assert sorted((e["allocation"], e["phase"]) for e in hello) == [("7", "running"), ("8", "waiting")]
    assert frames == [("exited", "7", "terminated"), ("started", "8", None)]


def test_an_exit_reported_just_before_the_agent_died_is_sent_by_the_agent_restarted(tmp_path):
    """The process exited 0 and left the state file; its exit was not yet acknowledged when the
    agent died. Kept in memory only, it was lost: the next hello no longer listed the work, and the
    control plane failed work that had completed."""
    async def first_agent() -> None:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)  # disconnected: no socket
        await agent.handle(_start("7", "pass"))
        for _ in range(100):
            if "7" not in agent.running:
                break
            await asyncio.sleep(0.05)
        assert json.loads((tmp_path / "agent-state.json").read_text()) == {}

    async def second_agent() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        await agent.adopt()
        agent.ws = Recorder()
        await agent.greet()
        return [(f["type"], f.get("allocation"), f.get("reason"), f.get("exit_code"), f.get("run"))
                for f in agent.ws.frames]

    asyncio.run(first_agent())  # (the agent object is dropped, as a killed agent's memory is)
    assert oct((tmp_path / "agent-reports.json").stat().st_mode & 0o777) == "0o600"
    # (its start superseded by its exit while disconnected: the latest report of the run)
    assert asyncio.run(second_agent()) == [("exited", "7", "completed", 0, 1), ("hello", None, None, None, None)]


def test_an_acknowledged_report_is_not_sent_again_after_a_restart(tmp_path):
    async def first_agent() -> None:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=True)
        agent.ws = Recorder()
        await agent.handle(_start("7", "pass"))
        for frame in agent.ws.frames:
            await agent.handle({"type": "ack", "id": frame["id"]})

    async def second_agent() -> list[str]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=True)
        await agent.adopt()
        agent.ws = Recorder()
        await agent.greet()
        return [f["type"] for f in agent.ws.frames]

    asyncio.run(first_agent())
    assert asyncio.run(second_agent()) == ["hello"]  # its start, acknowledged, is not sent again


def test_an_exit_kept_before_the_process_left_the_state_file_is_sent_once(tmp_path):
    """Died between keeping the exit and saving the state without the process: the restarted agent
    finds the process gone and its exit kept, and does not report a second exit of that run."""
    (tmp_path / "agent-state.json").write_text(json.dumps(
        {"7": {"pid": 2**22 + 12345, "checkpoint_dir": str(tmp_path / "checkpoints/7"), "devices": [], "run": 2}}))
    (tmp_path / "agent-reports.json").write_text(json.dumps([
        {"type": "exited", "id": "e1", "allocation": "7", "exit_code": 0, "reason": "completed", "run": 2}]))

    async def agent_restarted() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        await agent.adopt()
        agent.ws = Recorder()
        await agent.greet()
        return [(f["type"], f["id"] if f["type"] != "hello" else "", f.get("run")) for f in agent.ws.frames]

    assert asyncio.run(agent_restarted()) == [("exited", "e1", 2), ("hello", "", None)]


def test_a_damaged_or_edited_reports_file_is_left_out_not_fatal(tmp_path, caplog):
    (tmp_path / "agent-reports.json").write_text(json.dumps([
        {"type": "exited", "id": "e1", "allocation": "7", "exit_code": 0, "reason": "completed", "run": 1},
        {"type": "exited", "id": "e2", "allocation": "8", "reason": "bored"},  # not a frame the control plane takes
        "not a frame", {"type": "heartbeat", "id": "h", "seq": 1, "running": []}]))

    async def agent_restarted() -> list[str]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        await agent.adopt()
        agent.ws = Recorder()
        await agent.greet()
        return [f["id"] for f in agent.ws.frames if f["type"] != "hello"]

    assert asyncio.run(agent_restarted()) == ["e1"]
    assert "left out" in caplog.text
    (tmp_path / "agent-reports.json").write_text("{not json")
    assert asyncio.run(agent_restarted()) == []


def test_starts_to_make_again_stay_saved_until_each_is_made(tmp_path, monkeypatch):
    """A restarted agent saves what it took back before it makes its saved starts again: those
    starts must still be on disk then (in agent-waiting.json), or an agent killed in between would
    lose them; before, that save emptied the waiting file."""
    from nodes.agent_adopt import Adopting

    waiting = {"8": _start("8", "import time; time.sleep(60)")}
    (tmp_path / "agent-waiting.json").write_text(json.dumps(waiting))
    on_disk: list[dict] = []
    restore = Adopting._restore_waiting

    async def looked_at_first(self) -> None:
        on_disk.append(json.loads((tmp_path / "agent-waiting.json").read_text()))
        await restore(self)

    monkeypatch.setattr(Adopting, "_restore_waiting", looked_at_first)

    async def restarted() -> dict:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        pid = agent.running["8"].pid
        with contextlib.suppress(ProcessLookupError):
            if pid > 0:  # (its own process group: never 0, which would be this test's)
                os.killpg(pid, 9)
        return json.loads((tmp_path / "agent-waiting.json").read_text())

    after = asyncio.run(restarted())
    assert on_disk == [waiting]  # kept while the start was still to be made
    assert after == {}  # made: it runs now, and waits no more
