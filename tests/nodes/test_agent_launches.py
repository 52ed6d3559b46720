"""A start saved before its process is spawned (nodes/agent_launches.py): what an agent killed
between the spawn and the save of the process's pid leaves, and how the agent restarted takes it
back. Real launchers and processes; frames recorded where the socket would carry them. (Through
a real Daphne and a real agent killed inside that window: test_agent_crash.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nodes import agent_files, agent_launches, runas
from nodes.agent import Agent
from nodes.processes import EXIT_FILE
from tests.nodes.test_agent import IGNORES_SIGTERM, Recorder
from tests.nodes.test_agent_restart import _start


def _counting(runs: Path, go: Path) -> str:
    """A job that says it ran (one line per copy), then runs until ``go`` exists."""
    return (f"import os, time\nopen({str(runs)!r}, 'a').write('ran\\n')\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n")


def _saved_before_its_spawn(workdir: Path, frame: dict, launched: bool, **saved: Any) -> subprocess.Popen | None:
    """What an agent killed right after saving ``frame``'s start (before the pid) leaves: the entry
    with no pid, and, when ``launched``, its launcher running, which has claimed its file."""
    alloc = frame["allocation"]
    ckpt = workdir / frame["checkpoint_dir"]
    name, pid_file = agent_launches.new(workdir)
    (workdir / "agent-state.json").write_text(json.dumps({alloc: {
        "pid": 0, "checkpoint_dir": str(ckpt), "devices": ["GPU-0"], "run": 1, "launch": name, "start": frame,
        **saved}}))
    if not launched:
        return None
    launch = runas.prepare(frame, None, alloc, ckpt, workdir, ckpt / EXIT_FILE, pid_file=pid_file)
    proc = subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd, start_new_session=True)
    for _ in range(200):
        if pid_file.exists():
            return proc
        time.sleep(0.05)
    raise AssertionError("the launcher never claimed its file")


async def _until(check: Any, what: str) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _kill_all(agent: Agent) -> None:
    for entry in agent.running.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(entry.pid, 9)


def test_a_process_spawned_just_before_the_agent_died_is_taken_back_and_its_exit_reported_once(tmp_path):
    """Before, the restarted agent knew nothing of it: its hello did not list the work, and the
    control plane sent the start again (a second copy on the same GPUs) or failed it as lost."""
    runs, go = tmp_path / "runs", tmp_path / "go"
    frame = _start("7", _counting(runs, go))
    launcher = _saved_before_its_spawn(tmp_path, frame, launched=True)
    assert launcher is not None

    async def restarted() -> tuple[list[dict], list[dict]]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        hello = agent._hello()["running"]
        await agent.handle(frame)  # the start sent again (as a hello not listing it would have): a repeat
        await _until(runs.exists, "the job to run")
        go.write_text("")
        await _until(lambda: "7" not in agent.running, "the job to end")
        return hello, agent.ws.frames

    hello, frames = asyncio.run(restarted())
    assert hello == [{"allocation": "7", "phase": "running", "pid": launcher.pid, "run": 1}]
    assert [(f["type"], f.get("pid"), f.get("reason"), f.get("exit_code"), f["run"]) for f in frames] == [
        ("started", launcher.pid, None, None, 1), ("exited", None, "completed", 0, 1)]
    assert runs.read_text() == "ran\n"
    assert json.loads((tmp_path / "agent-state.json").read_text()) == {}
    assert list((tmp_path / agent_launches.LAUNCHES).iterdir()) == []  # its file went with it
    launcher.wait(timeout=10)


@pytest.mark.parametrize("still_waiting", [False, True])
def test_a_start_whose_launcher_had_not_run_is_made_again_and_that_launcher_never_runs(tmp_path, still_waiting):
    """Killed before the launcher claimed its file (or before the spawn): the restarted agent
    claims it, so that launcher, however late it comes, runs nothing, and makes the start again.
    ``still_waiting``: the start had waited for GPUs, and the agent died as it left the waits
    (saved in both files): it is still made once."""
    runs, go = tmp_path / "runs", tmp_path / "go"
    frame = _start("7", _counting(runs, go))
    _saved_before_its_spawn(tmp_path, frame, launched=False)
    old = json.loads((tmp_path / "agent-state.json").read_text())["7"]["launch"]
    if still_waiting:
        (tmp_path / "agent-waiting.json").write_text(json.dumps({"7": frame}))

    async def restarted() -> tuple[list[dict], str]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        await _until(runs.exists, "the job to run")
        launch = agent.running["7"].launch
        await asyncio.sleep(0.5)
        go.write_text("")
        await _until(lambda: "7" not in agent.running, "the job to end")
        return agent.ws.frames, launch

    frames, launch = asyncio.run(restarted())
    assert launch != old
    assert [(f["type"], f.get("reason"), f["run"]) for f in frames] == [("started", None, 1), ("exited", "completed", 1)]
    assert runs.read_text() == "ran\n"
    # The launcher of the start given up, coming now: it finds the agent's claim and runs nothing.
    ckpt = tmp_path / "checkpoints" / "7"
    exit_code = (ckpt / EXIT_FILE).read_text()  # (the job's, made again)
    late = runas.prepare(_start("7", _counting(runs, go)), None, "7", ckpt, tmp_path, ckpt / EXIT_FILE,
                         pid_file=agent_launches.pid_file(tmp_path, old))
    assert subprocess.run(late.argv, env=late.env, cwd=late.cwd, timeout=30, capture_output=True).returncode == 0
    assert runs.read_text() == "ran\n"
    assert (ckpt / EXIT_FILE).read_text() == exit_code


def test_a_start_stopped_while_it_was_spawned_is_reported_stopped_not_made_again(tmp_path):
    """A terminate came while the process was being spawned, and the agent died before the
    launcher ran: the work was stopped, so it is reported so and never started."""
    runs = tmp_path / "runs"
    _saved_before_its_spawn(tmp_path, _start("7", _counting(runs, tmp_path / "go")), launched=False,
                            signalled="terminated")

    async def restarted() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        await asyncio.sleep(0.5)
        assert agent.running == {} and agent.waiting == {}
        return [(f["type"], f.get("reason"), f.get("exit_code"), f["run"]) for f in agent.ws.frames]

    assert asyncio.run(restarted()) == [("exited", "terminated", None, 1)]
    assert not runs.exists()


def test_a_start_leaving_its_wait_for_gpus_is_on_disk_until_it_is_spawned(tmp_path, monkeypatch):
    """8 waits for 7, which is stopping, to leave GPU-0; 7 goes and 8 is prepared, then spawned.
    At every moment 8 must be on disk, waiting or saved as a start, so that an agent killed then
    starts it (once) when restarted. Before, it left the waits' file before it was prepared, and
    until its pid was saved it was in neither: lost."""
    snapshots: dict[str, Path] = {}

    def snapshot(moment: str) -> None:  # the disk as an agent killed now would leave it
        if moment not in snapshots:
            snapshots[moment] = tmp_path / moment
            shutil.copytree(tmp_path / "agent", snapshots[moment], ignore=shutil.ignore_patterns("checkpoints"))

    real_prepare, real_spawn = runas.prepare, asyncio.create_subprocess_exec

    def prepare(*args: Any, **kwargs: Any) -> Any:
        snapshot("prepared")
        return real_prepare(*args, **kwargs)

    async def spawn(*args: Any, **kwargs: Any) -> Any:
        snapshot("spawned")
        return await real_spawn(*args, **kwargs)

    async def first_agent() -> None:
        agent = Agent("ws://unused/", "token", tmp_path / "agent", simulate=False)
        agent.ws = Recorder()
        await agent.handle(_start("7", IGNORES_SIGTERM))
        await asyncio.sleep(0.5)
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
        await agent.handle(_start("8", "import time; time.sleep(60)"))
        monkeypatch.setattr(runas, "prepare", prepare)
        monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
        os.killpg(agent.running["7"].pid, 9)
        await _until(lambda: "8" in agent.running and agent.running["8"].pid > 0, "8 to be spawned")
        _kill_all(agent)
        monkeypatch.undo()

    async def restarted(workdir: Path) -> list[tuple]:
        agent = Agent("ws://unused/", "token", workdir, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        await _until(lambda: "8" in agent.running, "8 to start again")
        await asyncio.sleep(0.2)
        _kill_all(agent)
        return [(f["type"], f["allocation"]) for f in agent.ws.frames]

    (tmp_path / "agent").mkdir()
    asyncio.run(first_agent())
    assert sorted(snapshots) == ["prepared", "spawned"]
    for moment, workdir in snapshots.items():
        # (7's exit was kept before it left the state file: sent at the hello)
        assert asyncio.run(restarted(workdir)) == [("started", "8")], moment


def test_a_start_that_cannot_be_spawned_leaves_nothing_saved(tmp_path, monkeypatch):
    async def cannot(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no such interpreter")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", cannot)

    async def scenario() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle(_start("7", "pass"))
        return [(f["type"], f.get("reason")) for f in agent.ws.frames]

    assert asyncio.run(scenario()) == [("exited", "failed")]
    assert json.loads((tmp_path / "agent-state.json").read_text()) == {}


def test_a_start_that_cannot_be_saved_is_not_spawned(tmp_path, monkeypatch):
    """A full disk: spawned, its process would be one a killed agent could lose (and run twice)."""
    write = agent_files.write_private

    def full(path: Path, content: Any) -> None:
        if path.name == "agent-state.json" and content:
            raise OSError(28, "No space left on device")
        write(path, content)

    monkeypatch.setattr(agent_files, "write_private", full)
    runs = tmp_path / "runs"

    async def scenario() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle(_start("7", _counting(runs, tmp_path / "go")))
        await asyncio.sleep(0.5)
        assert agent.running == {}
        return [(f["type"], f.get("reason")) for f in agent.ws.frames]

    assert asyncio.run(scenario()) == [("exited", "failed")]
    assert not runs.exists()


def test_a_start_whose_launch_cannot_be_made_is_reported_failed(tmp_path):
    """Where agent-launches/ cannot be made (here a file holds its name; a full disk, a read-only
    work directory), the start raised out of the agent: never reported, and a start that had
    waited for GPUs was lost from both state files."""
    (tmp_path / agent_launches.LAUNCHES).write_text("")
    runs = tmp_path / "runs"

    async def scenario() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle(_start("7", _counting(runs, tmp_path / "go")))
        await asyncio.sleep(0.3)
        assert agent.running == {}
        return [(f["type"], f.get("reason"), f["run"]) for f in agent.ws.frames]

    assert asyncio.run(scenario()) == [("exited", "failed", 1)]
    assert not runs.exists()
