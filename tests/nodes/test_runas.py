"""Work runs as its tenant's Unix user (nodes/runas.py): real processes, real users.

The users are created with useradd for the test and removed after it, so this needs root; it is
skipped (with the reason) only when not root. CI runs as root on a throwaway machine, so it runs
there."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from nodes.agent import Agent
from tests.nodes.test_agent import Recorder

USERS = ("lat-ta-" + uuid.uuid4().hex[:6], "lat-tb-" + uuid.uuid4().hex[:6])


@pytest.fixture
def two_users():
    if os.geteuid() != 0:
        pytest.skip("needs root to create Unix users (useradd) and to drop privileges")
    made = []
    try:
        for name in USERS:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
            made.append(name)
        yield USERS
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False)


def _start(alloc: str, user: str, command: list[str], **extra) -> dict:
    return {"type": "start", "allocation": alloc, "command": command, "env": {"FROM_FRAME": "yes"}, "resources": {},
            "resume_from_checkpoint": False, "checkpoint_dir": f"checkpoints/{alloc}", "user": user, "group": "",
            "allow_root": False, "devices": [], **extra}


async def _run(workdir: Path, frames: list[dict], wait_for: int) -> list[dict]:
    agent = Agent("ws://unused/", "token", workdir, simulate=False)
    agent.ws = Recorder()
    for frame in frames:
        await agent.handle(frame)
        for _ in range(200):  # one at a time: the second job reads what the first wrote
            if sum(f["type"] == "exited" and f["allocation"] == frame["allocation"] for f in agent.ws.frames):
                break
            await asyncio.sleep(0.05)
    return agent.ws.frames


def test_a_job_runs_as_its_user_and_cannot_read_another_tenants_checkpoints(two_users):
    workdir = Path(tempfile.mkdtemp(prefix="lattice-runas-"))
    workdir.chmod(0o711)  # the users may pass through, not list
    a, b = two_users
    # A shell, not this interpreter: the new users may not reach the test's Python installation.
    write = ["/bin/sh", "-c", 'd="$LATTICE_CHECKPOINT_DIR"; echo a > "$d/secret"; env > "$d/env"; id -u > "$d/id"']
    steal = ["/bin/sh", "-c", f"cat {workdir}/checkpoints/1/secret"]
    frames = asyncio.run(_run(workdir, [_start("1", a, write), _start("2", b, steal)], 2))
    exits = {f["allocation"]: f for f in frames if f["type"] == "exited"}
    assert exits["1"]["reason"] == "completed"
    assert exits["2"]["reason"] == "failed" and exits["2"]["exit_code"] != 0  # permission denied
    ckpt = workdir / "checkpoints" / "1"
    assert (ckpt / "id").read_text().strip() == str(pwd.getpwnam(a).pw_uid)
    assert ckpt.stat().st_uid == pwd.getpwnam(a).pw_uid and ckpt.stat().st_mode & 0o777 == 0o700
    env = dict(line.split("=", 1) for line in (ckpt / "env").read_text().splitlines() if "=" in line)
    assert env["USER"] == a and env["FROM_FRAME"] == "yes" and env["LATTICE_ALLOCATION_ID"] == "1"
    assert "DATABASE_URL" not in env and "PYTEST_CURRENT_TEST" not in env  # a clean environment


def test_an_unknown_user_or_root_without_leave_is_refused_with_its_reason(tmp_path):
    frames = asyncio.run(_run(tmp_path, [_start("3", "no-such-user-" + uuid.uuid4().hex[:6], ["true"]),
                                         _start("4", "root", ["true"])], 2))
    assert [(f["allocation"], f["reason"]) for f in frames if f["type"] == "exited"] == [
        ("3", "user_unknown"), ("4", "refused")]
    assert not (tmp_path / "checkpoints" / "3").exists()


def test_an_agent_running_as_root_runs_no_unmapped_work_as_root_without_leave(tmp_path):
    """No user in the frame (the tenant maps none) and an agent running as root: the work would run
    as root, as the agent. Refused unless the operator allowed root for the tenant; a simulated
    agent, which runs nothing, takes it."""
    if os.geteuid() != 0:
        pytest.skip("the agent runs as root only when the test does")
    marker = tmp_path / "ran"
    touch = ["/bin/sh", "-c", f"id -u >> {marker}"]
    frames = asyncio.run(_run(tmp_path, [_start("5", "", touch), _start("6", "", touch, allow_root=True)], 2))
    assert [(f["allocation"], f["reason"]) for f in frames if f["type"] == "exited"] == [
        ("5", "refused"), ("6", "completed")]
    assert marker.read_text().split() == ["0"]  # once: the allowed one
    assert not (tmp_path / "checkpoints" / "5").exists()

    async def simulated() -> list[dict]:
        agent = Agent("ws://unused/", "token", tmp_path / "sim", simulate=True)
        agent.ws = Recorder()
        await agent.handle(_start("7", "", touch))
        return agent.ws.frames

    assert [(f["type"], f["allocation"]) for f in asyncio.run(simulated())] == [("started", "7")]


def test_an_agent_not_running_as_root_runs_unmapped_work_only_on_its_operators_word(tmp_path, monkeypatch):
    """No user in the frame and an agent running as an ordinary user: the work would run as the
    agent and could read its token. Refused (the tenant's allow_root does not change that) unless
    the agent was started with --unmapped-as-agent; a user of id 0 stays refused either way."""
    monkeypatch.setattr("nodes.runas.os.geteuid", lambda: 4242)  # the agent's user, not root
    monkeypatch.setattr(Agent, "unmapped_as_agent", False)  # tests/nodes/conftest.py gives leave when not root
    marker = tmp_path / "ran"
    touch = ["/bin/sh", "-c", f"echo ran >> {marker}"]
    frames = asyncio.run(_run(tmp_path, [_start("8", "", touch), _start("9", "", touch, allow_root=True)], 2))
    assert [(f["allocation"], f["reason"]) for f in frames if f["type"] == "exited"] == [
        ("8", "refused"), ("9", "refused")]
    assert not marker.exists() and not (tmp_path / "checkpoints" / "8").exists()

    monkeypatch.setattr(Agent, "unmapped_as_agent", True)  # --unmapped-as-agent
    frames = asyncio.run(_run(tmp_path, [_start("10", "", touch), _start("11", "root", touch)], 2))
    assert [(f["allocation"], f["reason"]) for f in frames if f["type"] == "exited"] == [
        ("10", "completed"), ("11", "refused")]
    assert marker.read_text().split() == ["ran"]


def test_the_agent_takes_unmapped_as_agent_from_its_command_line(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("nodes.agent._serve", lambda agent: seen.append(agent.unmapped_as_agent))
    monkeypatch.setattr("nodes.agent.asyncio.run", lambda result: 0)
    token = tmp_path / "token"
    token.write_text("t0k3n")
    base = ["--url", "ws://127.0.0.1:9/ws/agent/", "--token-file", str(token), "--workdir", str(tmp_path / "w")]
    from nodes.agent import main
    assert main(base) == 0 and main([*base, "--unmapped-as-agent"]) == 0
    assert seen == [False, True]


@pytest.mark.django_db
def test_run_agent_passes_unmapped_as_agent_to_the_agent(tmp_path, monkeypatch):
    from django.core.management import call_command

    from nodes.management.commands import run_agent
    given = []
    monkeypatch.setattr(run_agent.agent, "main", lambda argv: given.append(argv) or 0)
    for extra in ([], ["--unmapped-as-agent"]):
        with pytest.raises(SystemExit):
            call_command("run_agent", "--token-file", str(tmp_path / "t"), *extra)
    assert ["--unmapped-as-agent" in argv for argv in given] == [False, True]


def test_a_mapping_to_the_agents_own_user_is_unmapped_work_under_another_name(monkeypatch):
    """A non-root agent given a user who is itself runs the work as the agent (it can read the
    agent's token) just as unmapped work would: refused on the same terms, unless the node's
    operator started the agent with --unmapped-as-agent. Another user, or a simulated start, is
    not affected."""
    from nodes import runas
    own = pwd.getpwnam("daemon")
    monkeypatch.setattr("nodes.runas.os.geteuid", lambda: own.pw_uid)  # the agent runs as daemon
    with pytest.raises(runas.Refused) as refused:
        runas.resolve("daemon")
    assert refused.value.reason == "refused" and "the user this agent runs as" in str(refused.value)
    assert runas.resolve("daemon", unmapped_as_agent=True).uid == own.pw_uid
    assert runas.resolve("daemon", runs=False).uid == own.pw_uid
    assert runas.resolve("bin").uid == pwd.getpwnam("bin").pw_uid


def test_a_job_cannot_have_the_launcher_write_its_exit_code_through_a_link(two_users):
    """The launcher runs as root and writes the exit code into the checkpoint directory, which is
    the job's: a job that left a link there (``.exit-code`` to a file of root's) had root write
    over that file as it ended."""
    workdir = Path(tempfile.mkdtemp(prefix="lattice-runas-"))
    workdir.chmod(0o711)
    roots = Path(tempfile.mkdtemp(prefix="lattice-roots-"))  # (mode 0700, root's)
    target = roots / "precious"
    target.write_text("root's own\n")
    link = ["/bin/sh", "-c", f'ln -s {target} "$LATTICE_CHECKPOINT_DIR/.exit-code"']
    frames = asyncio.run(_run(workdir, [_start("1", two_users[0], link)], 1))
    assert [(f["type"], f.get("reason"), f.get("exit_code")) for f in frames] == [
        ("started", None, None), ("exited", "completed", 0)]
    assert target.read_text() == "root's own\n"
    assert not (workdir / "checkpoints" / "1" / ".exit-code").is_symlink()


@pytest.mark.parametrize("left", ["link", "fifo"])
def test_a_checkpoint_reads_no_file_of_roots_through_a_link_and_never_blocks_on_a_fifo(two_users, left):
    """The agent runs as root and reads FAILED and DONE in the job's checkpoint directory: a link
    there to a file of root's was read and reported (FAILED's first 500 characters went to the
    control plane, shown to the tenant), and a FIFO blocked the agent for good."""
    workdir = Path(tempfile.mkdtemp(prefix="lattice-runas-"))
    workdir.chmod(0o711)
    target = Path(tempfile.mkdtemp(prefix="lattice-roots-")) / "secret"
    target.write_text("root's secret\n")
    leave = f'ln -s {target} "$d/FAILED"' if left == "link" else 'mkfifo "$d/DONE"'
    job = ["/bin/sh", "-c", f'd="$LATTICE_CHECKPOINT_DIR"; trap \'{leave}\' USR1; '
                             'while true; do sleep 0.1; done']

    def unblock() -> None:  # a blocked reader of the FIFO is let go after 5 s (the test fails, not hangs)
        fifo = workdir / "checkpoints" / "1" / "DONE"
        for _ in range(100):
            time.sleep(0.1)
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    async def scenario() -> list[dict]:
        agent = Agent("ws://unused/", "token", workdir, simulate=False)
        agent.ws = Recorder()
        await agent.handle(_start("1", two_users[0], job))
        await asyncio.sleep(0.5)
        began = time.monotonic()
        try:
            await asyncio.wait_for(agent._checkpoint("1"), 10)
        finally:
            os.killpg(agent.running["1"].pid, 9)
        assert time.monotonic() - began < 3
        return agent.ws.frames

    threading.Timer(5, unblock).start()
    done = [f for f in asyncio.run(scenario()) if f["type"] == "checkpoint_done"]
    assert len(done) == 1 and "secret" not in str(done[0])
