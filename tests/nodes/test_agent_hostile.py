"""The agent program against settings and a control plane that are not what it expects: settings
that can never work are exit 2 and one line (systemd does not restart it for them); a frame it
cannot act on is logged and skipped, and the agent goes on with the next; a damaged state file
or a work directory it cannot prepare ends one allocation, not the agent."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time

import pytest
import websockets

from nodes import runas
from nodes.agent import Agent
from tests.conftest import ROOT
from tests.nodes.conftest import ROOT_LEAVE


def _agent(tmp_path, url: str, token_file, *more: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nodes.agent", "--url", url, "--token-file", str(token_file),
                             "--workdir", str(tmp_path / "work"), *more], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("content, url, more, said", [
    (b"\xff\xfe\x00token", "ws://127.0.0.1:9/ws/agent/", [], "is not text"),
    (b"two words\n", "ws://127.0.0.1:9/ws/agent/", [], "does not hold one token"),
    (b"lat_a\nlat_b\n", "ws://127.0.0.1:9/ws/agent/", [], "does not hold one token"),
    (b"lat_token", "http://127.0.0.1:9/ws/agent/", [], "is not a ws:// or wss:// URL"),
    (b"lat_token", "ws://127.0.0.1:99999/ws/agent/", [], "is not a ws:// or wss:// URL"),
    (b"lat_token", "ws://127.0.0.1:port/ws/agent/", [], "is not a ws:// or wss:// URL"),
    (b"lat_token", "ws://[::1/ws/agent/", [], "is not a ws:// or wss:// URL"),
    (b"lat_token", "ws://127.0.0.1:9/ws/agent/", ["--log-level", "LOUD"], "invalid choice"),
    (b"lat_token", "ws://127.0.0.1:9/ws/agent/", ["--simulate", "--sim-seconds", "nan"], "not a number of seconds"),
    (b"lat_token", "ws://127.0.0.1:9/ws/agent/", ["--simulate", "--sim-seconds", "-5"], "not a number of seconds"),
])
def test_settings_that_cannot_work_are_exit_2_in_one_line(tmp_path, content, url, more, said):
    token = tmp_path / "token"
    token.write_bytes(content)
    proc = _agent(tmp_path, url, token, *more)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 2 and said in out and "Traceback" not in out, out


def test_a_work_directory_it_cannot_make_is_exit_2(tmp_path):
    token = tmp_path / "token"
    token.write_text("lat_token\n")
    (tmp_path / "file").write_text("")
    proc = subprocess.run([sys.executable, "-m", "nodes.agent", "--url", "ws://127.0.0.1:9/ws/agent/",
                           "--token-file", str(token), "--workdir", str(tmp_path / "file" / "work")],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "cannot make the work directory" in proc.stderr
    assert "Traceback" not in proc.stderr


class ControlPlane:
    """A WebSocket server standing for the control plane: after the agent's hello it sends
    ``frames`` as they are, then keeps every frame the agent sends."""

    def __init__(self, frames: list[str]) -> None:
        self.frames, self.received, self.hellos = frames, [], 0
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True).start()
        assert self.ready.wait(10)

    async def _handler(self, ws) -> None:
        async for text in ws:
            frame = json.loads(text)
            self.received.append(frame)
            await ws.send(json.dumps({"type": "ack", "id": frame["id"]}))
            if frame["type"] == "hello":
                self.hellos += 1
                for sent in self.frames:
                    await ws.send(sent)

    async def _serve(self) -> None:
        async with websockets.serve(self._handler, "127.0.0.1", 0) as server:
            self.url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/ws/agent/"
            self.ready.set()
            await asyncio.Future()


def _start(alloc: str, **fields) -> dict:
    return {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", "pass"], "env": {},
            "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": f"checkpoints/{alloc}", **ROOT_LEAVE,
            **fields}


def test_frames_it_cannot_act_on_are_logged_and_the_next_one_is_run(tmp_path):
    """A real agent and a control plane that sends, after its welcome, frames of every wrong kind,
    then one good start: the agent stays on the one connection and runs the good one. Before, the
    first bad frame ended the agent with a traceback (and systemd started it again, to the same)."""
    outside = tmp_path / "outside"
    bad = ["not json", "[1, 2]", json.dumps({"type": "checkpoint"}), json.dumps({"type": "ack", "id": [1]}),
           json.dumps({"type": "welcome", "node": "n", "heartbeat_interval_s": "soon"}),
           json.dumps({"type": "terminate", "allocation": "3", "grace_s": "x"}),
           json.dumps(_start("4", env=["A=1"])), json.dumps(_start("5", command="sleep 1")),
           json.dumps(_start("../6")), json.dumps(_start("7", checkpoint_dir=str(outside))),
           json.dumps(_start("8", checkpoint_dir="../../outside")),
           json.dumps(_start("9", command=[sys.executable, "-c", "pass\x00"])),
           json.dumps(_start("10", allow_root="false", user="root")),
           # the work directory itself, which holds the agent's state: never handed to a job's user
           json.dumps(_start("12", checkpoint_dir="")), json.dumps(_start("13", checkpoint_dir="."))]
    plane = ControlPlane([json.dumps({"type": "welcome", "node": "n", "heartbeat_interval_s": 10}), *bad,
                          json.dumps(_start("11"))])
    token = tmp_path / "token"
    token.write_text("lat_token\n")
    proc = _agent(tmp_path, plane.url, token)
    try:
        deadline = time.monotonic() + 30
        while not any(f["type"] == "exited" for f in plane.received) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    reports = [(f["type"], f["allocation"], f.get("reason")) for f in plane.received if "allocation" in f]
    assert reports == [("started", "11", None), ("exited", "11", "completed")], out
    assert plane.hellos == 1 and "Traceback" not in out, out
    assert out.count("ignored a frame from the control plane") == len(bad), out
    assert not outside.exists() and not (tmp_path / "work" / "checkpoints" / "6").exists()


@pytest.mark.parametrize("given, waits", [({}, 30.0), ({"grace_s": None}, 30.0), ({"grace_s": 0}, 0.0),
                                          ({"grace_s": 5}, 5.0)])
def test_a_terminate_without_grace_s_kills_after_the_protocol_s_30_seconds(tmp_path, given, waits):
    """SIGTERM, then SIGKILL after the frame's grace, or the protocol's 30 s when it names none;
    before, a terminate without ``grace_s`` raised after the SIGTERM, and SIGKILL never came."""
    agent = Agent("ws://unused/", "t", tmp_path)
    signalled, kills = [], []
    agent._signal = lambda alloc, sig, why: signalled.append((alloc, sig)) or True  # type: ignore[method-assign]

    async def kill_after(alloc, grace):
        kills.append((alloc, grace))

    agent._kill_after = kill_after  # type: ignore[method-assign]

    async def run():
        await agent.handle({"type": "terminate", "allocation": "3", **given})
        await asyncio.sleep(0)

    asyncio.run(run())
    assert signalled == [("3", signal.SIGTERM)] and kills == [("3", waits)]


def _reports(agent: Agent) -> list:
    sent: list = []

    async def report(frame) -> None:
        sent.append(frame)

    agent.report = report  # type: ignore[method-assign]
    return sent


def test_a_damaged_state_file_adopts_what_it_can_and_starts(tmp_path):
    (tmp_path / "agent-state.json").write_text(json.dumps({
        "5": {"pid": "x"}, "6": 3, "7": {"pid": 0, "checkpoint_dir": str(tmp_path / "c7")}, "8": {}}))
    agent = Agent("ws://unused/", "t", tmp_path)
    sent = _reports(agent)
    asyncio.run(agent.adopt())
    # pid 0 is no process of the allocation's own (signalling it reaches the agent's group): ended.
    assert [(r.allocation, r.reason) for r in sent] == [("7", "failed")] and agent.running == {}


def test_a_list_for_a_state_file_is_ignored(tmp_path):
    (tmp_path / "agent-state.json").write_text("[1]")
    agent = Agent("ws://unused/", "t", tmp_path)
    sent = _reports(agent)
    asyncio.run(agent.adopt())
    assert sent == [] and agent.running == {}


def test_directories_it_cannot_prepare_end_that_allocation_failed(tmp_path, monkeypatch):
    """An agent that may not give a directory to the user (not root; a read-only disk) reports the
    start failed; before, the error left the frame's handler and dropped the connection, and the
    start sent again at the next hello did the same, without end."""
    def denied(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(runas.os, "chown", denied)
    agent = Agent("ws://unused/", "t", tmp_path)
    sent = _reports(agent)
    asyncio.run(agent.handle(_start("12", user="nobody")))
    assert [(r.allocation, r.reason) for r in sent] == [("12", "failed")] and agent.running == {}


@pytest.mark.parametrize("env", [{"A=B": "1"}, {"=": "1"}])
def test_an_env_name_exec_cannot_take_ends_that_allocation_failed(tmp_path, env):
    """Python refuses such a name (a ValueError, not an OSError) as it spawns: the start was left
    in ``running`` with pid 0, reported by no frame and listed by every hello, so the control
    plane kept the work running, its GPUs held, for ever."""
    agent = Agent("ws://unused/", "t", tmp_path, simulate=False)
    sent = _reports(agent)
    asyncio.run(agent.handle(_start("13", env=env)))
    assert [(r.allocation, r.reason) for r in sent] == [("13", "failed")] and agent.running == {}
    assert agent._hello()["running"] == []
