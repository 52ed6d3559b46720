"""The agent program on its own: real processes, frames recorded where the socket would carry them."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from nodes.agent import Agent
from nodes.protocol import Exited, Started, new_id
from tests.nodes.conftest import ROOT_LEAVE

# Takes half a second to stop after SIGTERM, as an application flushing its state would.
SLOW_TO_STOP = ("import signal, sys, time\n"
                "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(143)))\n"
                "time.sleep(60)\n")


class Recorder:
    """Stands where the WebSocket is: keeps every frame the agent sends, in order."""

    def __init__(self) -> None:
        self.frames: list[dict] = []

    async def send(self, text: str) -> None:
        self.frames.append(json.loads(text))


def test_a_new_run_starts_after_the_earlier_run_of_the_same_allocation_has_stopped(tmp_path):
    """Checkpointed, requeued and placed on the same node again: the start arrives while the
    first run is still stopping. It must not be dropped as a repeat, nor overlap the first run."""
    async def scenario() -> list[dict]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        start = {"type": "start", "allocation": "7", "command": [sys.executable, "-c", SLOW_TO_STOP],
                 "env": {}, "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": "checkpoints/7",
                 "run": 1, **ROOT_LEAVE}
        await agent.handle(start)
        await asyncio.sleep(0.5)  # the interpreter is up and has its handler
        # the frames back to back, as the socket delivers them
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 2})
        await agent.handle({**start, "resume_from_checkpoint": True, "run": 2})
        for _ in range(100):
            starts = [f for f in agent.ws.frames if f["type"] == "started"]
            if len(starts) == 2:
                break
            await asyncio.sleep(0.05)
        second = agent.running["7"]
        await asyncio.sleep(2.5)  # past the first run's grace: its SIGKILL must not reach this run
        assert agent.running.get("7") is second and second.signalled is None
        assert os.path.exists(f"/proc/{second.pid}")
        os.killpg(second.pid, 9)
        return agent.ws.frames

    frames = asyncio.run(scenario())
    kinds = [(f["type"], f.get("reason"), f.get("run")) for f in frames]
    # each report names the run it is about (the control plane ignores one of an earlier run)
    assert kinds == [("started", None, 1), ("exited", "terminated", 1), ("started", None, 2)]
    assert frames[0]["pid"] != frames[2]["pid"]


def test_reports_kept_while_disconnected_go_before_the_hello(tmp_path):
    """The control plane reconciles at hello: work the agent no longer runs is declared lost. What
    ended while the agent was disconnected must be reported first, so it is not counted lost."""
    async def scenario() -> list[dict]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=True)
        await agent.report(Exited(id=new_id(), allocation="7", exit_code=0, reason="completed"))
        agent.ws = Recorder()
        await agent.greet()
        return agent.ws.frames

    frames = asyncio.run(scenario())
    assert [(f["type"], f.get("allocation")) for f in frames] == [("exited", "7"), ("hello", None)]
    assert frames[1]["running"] == []


def test_heartbeat_seq_keeps_increasing_when_the_clock_is_stepped_back(tmp_path, monkeypatch):
    """An NTP step back while the agent runs: a seq from the clock would be at or below the last
    accepted one, refused as stale until the clock caught up, and the node would fall silent."""
    import nodes.agent

    clock = [1_700_000_000.0]
    monkeypatch.setattr(nodes.agent.time, "time", lambda: clock[0])
    agent = Agent("ws://unused/", "token", tmp_path, simulate=True)
    first = agent.next_seq()
    clock[0] -= 3600  # stepped back an hour
    after_step = [agent.next_seq(), agent.next_seq()]
    clock[0] += 7200  # and past where it was
    later = agent.next_seq()
    assert first == 1_700_000_000_000
    assert after_step == [first + 1, first + 2]
    assert later == 1_700_003_600_000


def test_work_bound_to_gpus_a_stopping_process_still_holds_starts_once_it_is_gone(tmp_path):
    """The control plane frees a victim's GPUs as soon as it asks it to stop (after its checkpoint,
    say); the process may take its grace to leave. A start bound to any of those GPUs waits for it;
    one bound to other GPUs starts at once."""
    async def scenario() -> list[tuple[str, str]]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()

        def start(alloc: str, *uuids: str) -> dict:
            return {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", SLOW_TO_STOP],
                    "env": {}, "resources": {}, "resume_from_checkpoint": False,
                    "checkpoint_dir": f"checkpoints/{alloc}", "devices": [
                        {"index": int(u[-1]), "uuid": u} for u in uuids], **ROOT_LEAVE}

        await agent.handle(start("7", "GPU-0", "GPU-1"))
        await asyncio.sleep(0.5)  # the interpreter is up and has its handler
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 2})
        await agent.handle(start("8", "GPU-1", "GPU-2"))  # shares GPU-1 with the process leaving
        await agent.handle(start("9", "GPU-3"))  # shares nothing
        for _ in range(100):
            if sum(f["type"] == "started" for f in agent.ws.frames) == 3:
                break
            await asyncio.sleep(0.05)
        for alloc in ("8", "9"):
            os.killpg(agent.running[alloc].pid, 9)
        return [(f["type"], f["allocation"]) for f in agent.ws.frames]

    order = asyncio.run(scenario())
    assert order[:4] == [("started", "7"), ("started", "9"), ("exited", "7"), ("started", "8")]


def test_a_start_waiting_for_gpus_is_listed_at_hello_and_dropped_by_a_stop_of_its_allocation(tmp_path):
    """A start waiting for a stopping process to leave its GPUs has no process yet. Its
    allocation may be cancelled or preempted meanwhile (the terminate finds nothing to signal), or
    the agent may reconnect (the hello must not leave it out, or the control plane counts it lost
    and frees its GPUs). Before, the stop was ignored and the start ran once the GPUs were free,
    beside the work placed there since; the hello listed nothing."""
    async def scenario() -> tuple[list[tuple[str, str, str | None]], list[dict]]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()

        def start(alloc: str) -> dict:
            return {"type": "start", "allocation": alloc, "command": [sys.executable, "-c", SLOW_TO_STOP],
                    "env": {}, "resources": {}, "resume_from_checkpoint": False,
                    "checkpoint_dir": f"checkpoints/{alloc}", "devices": [{"index": 0, "uuid": "GPU-0"}],
                    **ROOT_LEAVE}

        await agent.handle(start("7"))
        await asyncio.sleep(0.5)  # the interpreter is up and has its handler
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 2})
        await agent.handle(start("8"))  # waits for 7 to leave GPU-0
        await agent.handle(start("8"))  # the same start again (a reconnect): still one
        listed = agent._hello()["running"]
        await agent.handle({"type": "terminate", "allocation": "8", "grace_s": 2})  # cancelled meanwhile
        for _ in range(60):
            if not agent.running:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # time for a start that should not happen
        leftover = dict(agent.running)
        for entry in leftover.values():
            os.killpg(entry.pid, 9)
        assert leftover == {} and agent.waiting == {}
        return [(f["type"], f["allocation"], f.get("reason")) for f in agent.ws.frames], listed

    frames, listed = asyncio.run(scenario())
    assert {"allocation": "8", "phase": "waiting"} in listed
    assert ("started", "8", None) not in frames
    assert ("exited", "8", "terminated") in frames
    assert frames[0] == ("started", "7", None) and ("exited", "7", "terminated") in frames


def test_a_restarted_agent_names_the_run_of_what_it_adopts(tmp_path):
    """The run of each process is kept in the state file: after the agent's own restart, its hello
    and the exit of an adopted process still name the run their start gave."""
    async def first_agent() -> None:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle({"type": "start", "allocation": "7", "command": [sys.executable, "-c", SLOW_TO_STOP],
                            "env": {}, "resources": {}, "resume_from_checkpoint": False,
                            "checkpoint_dir": "checkpoints/7", "run": 3, **ROOT_LEAVE})

    async def second_agent() -> tuple[list[dict], list[dict]]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.adopt()
        hello = agent._hello()["running"]
        os.killpg(agent.running["7"].pid, 9)
        for _ in range(100):
            if agent.ws.frames:
                break
            await asyncio.sleep(0.05)
        return hello, agent.ws.frames

    asyncio.run(first_agent())
    hello, frames = asyncio.run(second_agent())
    assert [(e["allocation"], e.get("run")) for e in hello] == [("7", 3)]
    assert [(f["type"], f["allocation"], f.get("run")) for f in frames] == [("exited", "7", 3)]


IGNORES_SIGTERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"


def test_while_disconnected_the_latest_report_is_kept_per_run_not_per_allocation(tmp_path):
    """The control plane ignores an earlier run's report: had it replaced the next run's exit, that
    exit would never be told, and the next hello would count the work lost."""
    async def scenario() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=True)
        await agent.report(Started(id=new_id(), allocation="7", pid=1, run=2))
        await agent.report(Exited(id=new_id(), allocation="7", exit_code=0, reason="completed", run=2))
        await agent.report(Exited(id=new_id(), allocation="7", exit_code=None, reason="killed", run=1))
        agent.ws = Recorder()
        await agent.greet()
        return [(f["type"], f.get("run"), f.get("reason")) for f in agent.ws.frames]

    assert asyncio.run(scenario()) == [("exited", 2, "completed"), ("exited", 1, "killed"), ("hello", None, None)]


def test_a_checkpoint_hint_never_reaches_a_process_being_stopped(tmp_path):
    """Its stop was asked: a hint for the allocation now is for a later run waiting to start, and
    the leaving process's checkpoint would be of another run (the control plane sets it aside)."""
    marker = tmp_path / "got-usr1"
    code = ("import signal, time, pathlib\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path({str(marker)!r}).write_text('x'))\n"
            "time.sleep(60)\n")

    async def scenario() -> None:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle({"type": "start", "allocation": "7", "command": [sys.executable, "-c", code], "env": {},
                            "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": "checkpoints/7",
                            "run": 1, **ROOT_LEAVE})
        await asyncio.sleep(0.5)  # the interpreter is up with its handlers
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
        await agent.handle({"type": "checkpoint", "allocation": "7", "deadline": "2026-01-01T00:00:00+00:00"})
        await asyncio.sleep(0.5)
        os.killpg(agent.running["7"].pid, 9)

    asyncio.run(scenario())
    assert not marker.exists()


def test_a_later_run_s_start_replaces_the_start_still_waiting_for_the_same_allocation(tmp_path):
    """Run 2 waits for run 1's process to leave; the control plane has moved on to run 3 (run 2 was
    stopped and requeued before it began, its stop lost in a reconnect): run 3 starts, not run 2."""
    def start(run: int) -> dict:
        return {"type": "start", "allocation": "7", "command": [sys.executable, "-c", IGNORES_SIGTERM], "env": {},
                "resources": {}, "resume_from_checkpoint": False, "checkpoint_dir": "checkpoints/7", "run": run,
                **ROOT_LEAVE}

    async def scenario() -> list[tuple]:
        agent = Agent("ws://unused/", "token", tmp_path, simulate=False)
        agent.ws = Recorder()
        await agent.handle(start(1))
        await asyncio.sleep(0.5)  # up, ignoring SIGTERM
        await agent.handle({"type": "terminate", "allocation": "7", "grace_s": 600})
        await agent.handle(start(2))
        await agent.handle(start(2))  # repeated: still run 2 waiting
        assert agent.waiting["7"].run == 2
        await agent.handle(start(3))
        assert agent.waiting["7"].run == 3
        os.killpg(agent.running["7"].pid, 9)
        for _ in range(100):
            if any(f["type"] == "started" and f["run"] == 3 for f in agent.ws.frames):
                break
            await asyncio.sleep(0.05)
        os.killpg(agent.running["7"].pid, 9)
        return [(f["type"], f.get("run")) for f in agent.ws.frames]

    assert asyncio.run(scenario()) == [("started", 1), ("exited", 1), ("started", 3)]
