"""A pid the agent saved is taken back only while it is the same process: saved in this boot of
the node, and started when the saved one did. Another process that has the number since (after a
reboot, or while the agent was down) is never adopted, watched or signalled as the job's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

from nodes import processes
from nodes.agent import Agent
from nodes.processes import alive, started_ticks
from tests.nodes.test_agent import Recorder


def _adopted(workdir, saved: dict) -> tuple[dict, list[dict]]:
    (workdir / "agent-state.json").write_text(json.dumps(saved))

    async def run() -> tuple[dict, list[dict]]:
        agent = Agent("ws://unused/", "token", workdir, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        return dict(agent.running), list(agent.ws.frames)

    return asyncio.run(run())


def _entry(pid: int, workdir, **more) -> dict:
    return {"pid": pid, "checkpoint_dir": str(workdir / "ckpt"), "devices": [], "run": 1, **more}


def test_a_process_saved_in_this_boot_and_still_the_same_is_taken_back(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running, frames = _adopted(tmp_path, {"7": _entry(other.pid, tmp_path, boot=processes.BOOT,
                                                          since=started_ticks(other.pid))})
        assert set(running) == {"7"} and frames == []
    finally:
        other.kill()
        other.wait()


def test_a_pid_saved_in_an_earlier_boot_is_another_process_and_is_left_alone(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running, frames = _adopted(tmp_path, {"7": _entry(other.pid, tmp_path, boot="an-earlier-boot",
                                                          since=started_ticks(other.pid))})
        assert running == {}
        assert [(f["type"], f["allocation"]) for f in frames] == [("exited", "7")]
        assert alive(other.pid)  # never the job's: not signalled
        saved = json.loads((tmp_path / "agent-state.json").read_text())
        assert saved == {}
    finally:
        other.kill()
        other.wait()


def test_a_pid_another_process_took_since_it_was_saved_is_left_alone(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running, frames = _adopted(tmp_path, {"7": _entry(other.pid, tmp_path, boot=processes.BOOT,
                                                          since=started_ticks(other.pid) + 1)})
        assert running == {}
        assert [(f["type"], f["allocation"]) for f in frames] == [("exited", "7")]
        assert alive(other.pid)
    finally:
        other.kill()
        other.wait()


def test_a_spawned_process_is_saved_with_its_boot_and_start_time(tmp_path):
    from tests.nodes.test_agent_restart import _start

    async def run() -> dict:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle(_start("7", "import time; time.sleep(60)"))
        pid = agent.running["7"].pid
        try:
            saved = json.loads((tmp_path / "agent-state.json").read_text())["7"]
            assert pid > 0 and saved["since"] == started_ticks(pid) > 0
        finally:
            if pid > 0:  # (its own process group: never 0, which would be this test's)
                os.killpg(pid, signal.SIGKILL)
        return saved

    saved = asyncio.run(run())
    assert saved["boot"] == processes.BOOT != ""
