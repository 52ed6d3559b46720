"""The agent's side of the checkpoint files: what the application writes becomes report frames,
each change once (nodes/checkpoint_files.py), and the agent relays them while it waits for DONE."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from nodes import checkpoint_files
from nodes.agent import Agent
from nodes.checkpoint_files import CheckpointFiles, size_of, write_atomic
from nodes.protocol import encode
from tests.nodes.conftest import ROOT_LEAVE
from tests.nodes.test_agent import Recorder


def _frames(files: CheckpointFiles) -> list[dict]:
    """What the agent would send for allocation 7, less the parts that differ every time."""
    return [{k: v for k, v in encode(f).items() if k not in ("id", "allocation")} for f in files.poll("7")]

def test_each_progress_change_becomes_one_frame(tmp_path):
    files = CheckpointFiles(tmp_path)
    assert _frames(files) == []
    write_atomic(tmp_path, "PROGRESS", "40\n")
    assert _frames(files) == [{"type": "checkpoint_progress", "percent": 40}]
    assert _frames(files) == []  # unchanged: not again
    write_atomic(tmp_path, "PROGRESS", "70.5 12\n")
    assert _frames(files) == [{"type": "checkpoint_progress", "percent": 70.5, "eta_s": 12}]
    assert _frames(files) == []
    (tmp_path / "PROGRESS").write_text("90 3")  # a plain write counts too
    assert _frames(files) == [{"type": "checkpoint_progress", "percent": 90, "eta_s": 3}]
    assert (tmp_path / "PROGRESS").exists()  # the application's own record stays


def test_each_deferral_written_becomes_one_frame_even_when_repeated(tmp_path):
    files = CheckpointFiles(tmp_path)
    write_atomic(tmp_path, "DEFER", "60\n")
    assert _frames(files) == [{"type": "defer", "seconds": 60}]
    assert not (tmp_path / "DEFER").exists()  # taken: a request is sent once
    assert _frames(files) == []
    write_atomic(tmp_path, "DEFER", "60\n")  # the same request again is a second request
    assert _frames(files) == [{"type": "defer", "seconds": 60}]
    assert list(tmp_path.iterdir()) == []


def test_bad_content_is_logged_and_not_sent(tmp_path, caplog):
    files = CheckpointFiles(tmp_path)
    caplog.set_level(logging.WARNING, logger="lattice.agent")
    for progress, defer in (("140", "1.5"), ("forty", "-2"), ("40 -1", "60 s"), ("", "")):
        write_atomic(tmp_path, "PROGRESS", progress)
        write_atomic(tmp_path, "DEFER", defer)
        assert _frames(files) == []
    assert len([r for r in caplog.records if "ignored" in r.getMessage()]) == 8
    write_atomic(tmp_path, "PROGRESS", "50")
    assert _frames(files) == [{"type": "checkpoint_progress", "percent": 50}]  # a fixed file is read again


def test_clear_removes_an_earlier_checkpoints_files(tmp_path):
    for name in ("DONE", "FAILED", "PROGRESS", "DEFER"):
        (tmp_path / name).write_text("60")
    (tmp_path / "state.json").write_text("{}")
    files = CheckpointFiles(tmp_path)
    files.clear()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # the application's data stays
    assert _frames(files) == []


# On SIGUSR1: progress, a deferral, more progress, then DONE naming where the checkpoint went.
APP = """
import os, signal, sys, time
from nodes.checkpoint import defer, done, progress
hinted = []
signal.signal(signal.SIGUSR1, lambda *_: hinted.append(1))
open(os.path.join(os.environ["LATTICE_CHECKPOINT_DIR"], "ready"), "w").close()  # a hint may come
while not hinted:
    time.sleep(0.05)
progress(30, eta_s=2)
time.sleep(0.5)
defer(45)
time.sleep(0.5)
progress(80)
time.sleep(0.5)
done(location=sys.argv[1])
time.sleep(60)
"""


def test_the_agent_relays_a_real_applications_files_in_order_each_once(tmp_path):
    """A real application process under the agent; frames recorded where the socket would be.
    The checkpoint hint arrives twice (re-sent at a reconnect): still one report per change."""
    async def scenario() -> list[dict]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle({"type": "start", "allocation": "9", "command": [sys.executable, "-c", APP, "/ckpt/9"],
                            "env": {}, "resources": {}, "resume_from_checkpoint": False,
                            "checkpoint_dir": "checkpoints/9", **ROOT_LEAVE})
        ready = tmp_path / "checkpoints" / "9" / "ready"
        for _ in range(600):  # the interpreter is up and has its handler (a SIGUSR1 before would end it)
            if ready.exists():
                break
            await asyncio.sleep(0.05)
        hint = {"type": "checkpoint", "allocation": "9", "deadline": "2030-01-01T00:00:00+00:00",
                "reason": "preempted"}
        await agent.handle(hint)
        await asyncio.sleep(0.3)
        await agent.handle(hint)
        for _ in range(100):
            if any(f["type"] == "checkpoint_done" for f in agent.ws.frames):
                break
            await asyncio.sleep(0.1)
        os.killpg(agent.running["9"].pid, 9)
        await asyncio.sleep(0.5)  # the agent sees it end
        return agent.ws.frames

    frames = asyncio.run(scenario())
    reports = [{k: v for k, v in f.items() if k != "id"} for f in frames
               if f["type"] in ("checkpoint_progress", "defer", "checkpoint_done")]
    assert reports == [
        {"type": "checkpoint_progress", "allocation": "9", "percent": 30, "eta_s": 2},
        {"type": "defer", "allocation": "9", "seconds": 45},
        {"type": "checkpoint_progress", "allocation": "9", "percent": 80},
        {"type": "checkpoint_done", "allocation": "9", "ok": True, "location": "/ckpt/9"},  # no size: not here
    ]
    assert len({f["id"] for f in frames}) == len(frames)


# -- the size of what DONE names: the job names it, the agent may run as root ------------------

def test_a_checkpoint_is_sized_without_following_links(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "shards").mkdir(parents=True)
    (ckpt / "a.bin").write_bytes(b"x" * 100)
    (ckpt / "shards" / "b.bin").write_bytes(b"y" * 20)
    (tmp_path / "big-elsewhere").write_bytes(b"z" * 5000)
    (ckpt / "link").symlink_to(tmp_path / "big-elsewhere")
    (ckpt / "dirlink").symlink_to(tmp_path)
    assert size_of(str(ckpt)) == 120
    assert size_of(str(ckpt / "a.bin")) == 100
    assert size_of(str(ckpt / "link")) is None  # named through a link: not followed
    assert size_of(str(tmp_path / "missing")) is None


def test_a_tree_too_big_to_walk_is_not_sized(tmp_path, monkeypatch):
    for i in range(8):
        (tmp_path / f"f{i}").write_text("1")
    assert checkpoint_files.size_of(str(tmp_path)) == 8
    monkeypatch.setattr(checkpoint_files, "MAX_SIZE_ENTRIES", 5)
    assert checkpoint_files.size_of(str(tmp_path)) is None
