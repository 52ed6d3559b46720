"""The agent's work on its node: starting each allocation's process (as its user, in its cgroup,
seeing its GPUs, saved before it is spawned), watching it end, relaying its checkpoint, and
signalling it. A mixin of nodes/agent.py's Agent, which owns the connection and the reports;
what a previous run of the agent left is taken back by nodes/agent_adopt.py.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Any

from nodes import agent_files, agent_launches, cgroups, runas
from nodes.checkpoint_files import CheckpointFiles, done_location, read_plain, size_of
from nodes.processes import (
    BOOT,
    EXIT_FILE,
    Running,
    Waiting,
    device_uuids,
    recorded_exit_code,
    started_ticks,
)
from nodes.protocol import (
    NOT_STARTED,
    CheckpointDone,
    Exited,
    Report,
    Started,
    new_id,
)

log = logging.getLogger("lattice.agent")


class Work:
    """What the agent runs. The Agent provides the attributes below and ``report``."""

    workdir: Path
    simulate: bool
    unmapped_as_agent: bool
    sim_seconds: float
    running: dict[str, Running]
    # Starts waiting for a stopping process to leave their GPUs (allocation -> the waiting task):
    # listed at hello, and dropped by a terminate or kill of their allocation.
    waiting: dict[str, Waiting]
    # Starts a restarted agent has still to make again or put back to wait (nodes/agent_adopt.py):
    # saved with the waiting ones meanwhile, so an agent killed before it made them loses none.
    restoring: dict[str, Any]
    state_file: Path
    limiter: cgroups.Limiter | None

    unacked: dict[str, dict[str, Any]]
    latest: dict[tuple[str, int], str]

    async def report(self, report: Report) -> None:
        raise NotImplementedError

    def keep(self, report: Report) -> dict[str, Any]:
        raise NotImplementedError

    async def send_kept(self, frame: dict[str, Any]) -> None:
        raise NotImplementedError

    def restore_reports(self) -> None:
        raise NotImplementedError

    def _probe_limits(self) -> None:
        raise NotImplementedError

    # -- surviving our own restart (taken back by nodes/agent_adopt.py) ----------------------------
    def _save(self) -> None:
        """What runs (each process, its run, whether it is being stopped; a start being spawned)
        and the starts that wait for stopping processes: a restarted agent takes both back
        (``adopt``). What runs is written first, so a start leaving the waits (saved as it is
        spawned) is in one file or both at every moment, never in neither."""
        data = {a: agent_files.entry_record(r) for a, r in self.running.items()}
        agent_files.write_private(self.state_file, data)
        agent_files.write_private(self.waiting_file,
                                  {**self.restoring, **{a: w.frame for a, w in self.waiting.items()}})

    @property
    def waiting_file(self) -> Path:
        return self.state_file.with_name("agent-waiting.json")

    @property
    def reports_file(self) -> Path:
        return self.state_file.with_name("agent-reports.json")

    async def _gone(self, entry: Running, code: int | None) -> None:
        """``entry``'s process is gone: its exit is kept (on disk) before the process leaves the
        state file, so an agent that dies in between reports it once restarted, never loses it."""
        frame = self.keep(Exited(id=new_id(), allocation=entry.allocation, exit_code=code,
                                 reason=exit_reason(entry, code), run=entry.run))
        if self.running.get(entry.allocation) is entry:
            self.running.pop(entry.allocation)
        self._save()
        cgroups.remove(entry.cgroup)
        agent_launches.forget(self.workdir, entry.launch)
        await self.send_kept(frame)

    # -- running work ----------------------------------------------------------------------
    async def _start(self, frame: dict[str, Any]) -> None:
        alloc, run = str(frame["allocation"]), int(frame.get("run") or 0)
        waiting = self.waiting.get(alloc)
        if waiting is not None:
            if not run or run <= waiting.run:
                return  # a repeated start (after a reconnect): it already waits to start
            # A later run: the control plane moved on from the one waiting (it never began), so
            # this one waits in its place.
            waiting.task.cancel()
            del self.waiting[alloc]
            self._save()
        old = self.running.get(alloc)
        if old is not None and old.signalled and old.task is not None:
            # A new run of an allocation whose earlier run is still being stopped (it was
            # checkpointed and requeued, then placed here again): start it once that one is gone.
            self._wait_then_start(alloc, [old.task], frame)
            return
        if old is not None:
            return  # a repeated start (after a reconnect): it already runs
        devices = device_uuids(frame.get("devices"))
        leaving = self._leaving(devices)
        if leaving:
            # Its GPUs are still used by a process being stopped (checkpointed, cancelled or
            # preempted: the control plane freed them once the stop was asked). Started once that
            # process is gone, at most the kill's grace later: two jobs never share a GPU.
            log.info("starting %s once %d stopped process(es) leave its GPUs", alloc, len(leaving))
            self._wait_then_start(alloc, leaving, frame)
            return
        ckpt = self.workdir / frame.get("checkpoint_dir", f"checkpoints/{alloc}")
        cgroup = None
        try:  # who it runs as, where, seeing what (nodes/runas.py); refused before anything is made
            name, pid_file = ("", None) if self.simulate else self._new_launch()
            who = runas.resolve(frame.get("user", ""), frame.get("group", ""), bool(frame.get("allow_root")),
                                runs=not self.simulate, unmapped_as_agent=self.unmapped_as_agent)
            cgroup = self._limit(alloc, frame.get("resources") or {})
            launch = runas.prepare(frame, who, alloc, ckpt, self.workdir, ckpt / EXIT_FILE, cgroup=cgroup,
                                   pid_file=pid_file)
        except runas.Refused as exc:
            cgroups.remove(cgroup)
            log.warning("not starting %s: %s", alloc, exc)
            await self.report(Exited(id=new_id(), allocation=alloc, exit_code=None, reason=exc.reason, run=run))
            return
        entry = Running(alloc, checkpoint_dir=ckpt, cgroup=cgroup, devices=devices, run=run, launch=name, boot=BOOT)
        self.running[alloc] = entry
        if self.simulate:
            entry.task = asyncio.get_running_loop().create_task(self._simulated(entry))
            await self.report(Started(id=new_id(), allocation=alloc, pid=0, run=run))
            return
        await self._spawn(entry, launch, frame)

    async def _spawn(self, entry: Running, launch: runas.Launch, frame: dict[str, Any]) -> None:
        """Run ``entry``'s launcher. The start is saved first, with no pid yet: an agent killed
        before it saves the pid takes the process back once restarted, or makes the start again
        (``_launched``); before, it knew nothing of the process, which ran on, holding its GPUs,
        while the control plane sent the start again (a second copy on the same GPUs)."""
        alloc, run = entry.allocation, entry.run
        (entry.checkpoint_dir / EXIT_FILE).unlink(missing_ok=True)
        entry.start = frame
        try:
            self._save()  # (a start that cannot be saved is not spawned: the agent could lose its process)
            proc = await asyncio.create_subprocess_exec(*launch.argv, env=launch.env, cwd=launch.cwd,
                                                        start_new_session=True)
        except (OSError, ValueError) as exc:  # ValueError: an env name exec cannot take ("A=B")
            if self.running.get(alloc) is entry:
                self.running.pop(alloc)
            with contextlib.suppress(OSError):
                self._save()
            cgroups.remove(entry.cgroup)
            await self.report(Exited(id=new_id(), allocation=alloc, exit_code=None, reason="failed", run=run))
            log.warning("cannot start %s: %s", alloc, exc)
            return
        self._spawned(entry, proc)
        entry.start = None
        self._save()
        await self.report(Started(id=new_id(), allocation=alloc, pid=proc.pid, run=run))

    def _spawned(self, entry: Running, proc: asyncio.subprocess.Process) -> None:
        """``entry``'s process now runs: its pid, its watch, and the stop that came while it was
        being spawned (it had no pid to signal then; pid 0 would have signalled the agent's group)."""
        entry.pid, entry.since = proc.pid, started_ticks(proc.pid)
        if entry.signalled:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL if entry.signalled == "killed" else signal.SIGTERM)
        entry.task = asyncio.get_running_loop().create_task(self._watch(entry, proc))

    def _new_launch(self) -> tuple[str, Path]:
        """A launch for a start (nodes/agent_launches.py); one that cannot be made is the start failed."""
        try:
            return agent_launches.new(self.workdir)
        except OSError as exc:
            raise runas.Refused("failed", f"cannot make its launch: {exc.strerror or exc}") from None

    def _limit(self, alloc: str, resources: dict[str, Any]) -> Path | None:
        """The allocation's own cgroup, limited to its request (None: no limits on this node)."""
        self._probe_limits()  # (done at the first hello; a start restored after a restart comes before)
        if self.limiter is None or self.simulate:
            return None
        try:
            return self.limiter.make(alloc, float(resources.get("cpu") or 0), float(resources.get("memory") or 0))
        except cgroups.Unavailable as exc:  # not run unlimited on a node that limits
            raise runas.Refused("failed", f"cannot limit it: {exc}") from None

    def _wait_then_start(self, alloc: str, previous: list[asyncio.Task[Any]], frame: dict[str, Any]) -> None:
        """Start ``frame`` once the ``previous`` processes are gone. Until then the start is
        ``waiting``: the hello lists it (the control plane would count it lost otherwise), and a
        terminate or kill of its allocation drops it (``_signal``), so work stopped before it
        could start never starts later, beside whatever the control plane placed there since."""
        task = asyncio.get_running_loop().create_task(self._start_after(alloc, previous, frame))
        self.waiting[alloc] = Waiting(task, frame)
        self._save()

    async def _start_after(self, alloc: str, previous: list[asyncio.Task[Any]], frame: dict[str, Any]) -> None:
        await asyncio.gather(*(asyncio.shield(task) for task in previous), return_exceptions=True)
        waiting = self.waiting.get(alloc)
        if waiting is not None and waiting.task is asyncio.current_task():
            # No longer waiting: a stop now finds it running (or not at all). Saved with its start
            # (``_spawn``), in the same save: an agent killed between two saves lost the start.
            del self.waiting[alloc]
        try:
            await self._start(frame)
        finally:
            self._save()  # (as it ended: refused, waiting again, or running)

    def _leaving(self, devices: frozenset[str]) -> list[asyncio.Task[Any]]:
        """The watches of processes being stopped that still hold any of ``devices``."""
        return [e.task for e in self.running.values()
                if e.signalled and e.devices & devices and e.task is not None and not e.task.done()]

    async def _watch(self, entry: Running, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        code = recorded_exit_code(entry.checkpoint_dir)
        await self._gone(entry, proc.returncode if code is None else code)

    async def _simulated(self, entry: Running) -> None:
        try:
            await asyncio.sleep(self.sim_seconds)
        except asyncio.CancelledError:
            return
        self.running.pop(entry.allocation, None)
        await self.report(Exited(id=new_id(), allocation=entry.allocation, exit_code=0, reason="completed",
                                 run=entry.run))

    async def _checkpoint(self, alloc: str) -> None:
        waiting = self.waiting.pop(alloc, None)
        if waiting is not None:
            # Its run never began (it waits for a stopping process to leave its GPUs): there is
            # nothing to checkpoint, and it must not start now. Its state is still the one it
            # would have resumed from, so the control plane requeues it as it was.
            waiting.task.cancel()
            self._save()
            log.info("checkpoint of %s: its run %s had not started, dropped", alloc, waiting.run)
            await self.report(Exited(id=new_id(), allocation=alloc, exit_code=None, reason=NOT_STARTED,
                                     run=waiting.run))
            return
        entry = self.running.get(alloc)
        while entry is not None and entry.pid <= 0 and not self.simulate and self.running.get(alloc) is entry:
            await asyncio.sleep(0.05)  # being spawned: signalled once it has its pid
        entry = self.running.get(alloc)
        if entry is None or entry.phase == "checkpointing":
            # A repeated hint (re-sent at hello) while this run already checkpoints: one watcher,
            # or a second one would clear what the application wrote and report it twice.
            return
        if entry.signalled:
            # Being stopped: the hint is for a later run of the allocation, still waiting to start
            # (this process's checkpoint would be of another run, and set aside as such).
            log.warning("checkpoint of %s ignored: its process here is being stopped (%s)", alloc, entry.signalled)
            return
        entry.phase = "checkpointing"
        done, failed = entry.checkpoint_dir / "DONE", entry.checkpoint_dir / "FAILED"
        files = CheckpointFiles(entry.checkpoint_dir)
        files.clear()  # DONE, FAILED, PROGRESS, DEFER of an earlier checkpoint
        if self.simulate:
            await asyncio.sleep(1.0)
            done.write_text("simulated")
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry.pid, signal.SIGUSR1)
        while alloc in self.running and not (done.exists() or failed.exists()):
            await self._relay(entry, files)
            await asyncio.sleep(0.2)
        await self._relay(entry, files)  # what was written just before DONE goes first
        if done.exists():
            location = done_location(entry.checkpoint_dir)
            size = await asyncio.to_thread(size_of, location)  # (a tree: not on the event loop)
            await self.report(CheckpointDone(id=new_id(), allocation=alloc, ok=True, location=location,
                                             size_bytes=size or 0, run=entry.run))
        elif failed.exists():
            await self.report(CheckpointDone(id=new_id(), allocation=alloc, ok=False, run=entry.run,
                                             location=str(entry.checkpoint_dir), error=self._failure(failed)))

    @staticmethod
    def _failure(failed: Path) -> str:
        """What the application wrote to FAILED (its start), read as the job's files are."""
        try:
            return read_plain(failed)[:500]
        except OSError as exc:
            return f"FAILED not read: {exc.strerror or exc}"

    async def _relay(self, entry: Running, files: CheckpointFiles) -> None:
        """The application's PROGRESS and DEFER files, each change reported once."""
        for frame in files.poll(entry.allocation, entry.run):
            await self.report(frame)

    async def _kill_after(self, alloc: str, grace: float) -> None:
        entry = self.running.get(alloc)
        await asyncio.sleep(grace)
        if entry is not None and self.running.get(alloc) is entry:
            self._signal(alloc, signal.SIGKILL, "killed")

    def _signal(self, alloc: str, sig: signal.Signals, reason: str) -> bool:
        waiting = self.waiting.pop(alloc, None)
        if waiting is not None:  # stopped before it could start: it never will
            waiting.task.cancel()
            # Its own exit, unless the process still leaving is of the same run (its exit says it):
            # the exit of an earlier run, reported as it leaves, says nothing of this one.
            leaving = self.running.get(alloc)
            if leaving is None or leaving.run != waiting.run:
                asyncio.get_running_loop().create_task(self.report(
                    Exited(id=new_id(), allocation=alloc, exit_code=None, reason=reason, run=waiting.run)))
        entry = self.running.get(alloc)
        signalled = entry is not None and not self.simulate
        if entry is not None:
            entry.signalled = reason  # saved: a restarted agent still knows it is leaving
            if self.simulate:
                if entry.task is not None:
                    entry.task.cancel()
                self.running.pop(alloc, None)
                asyncio.get_running_loop().create_task(self.report(
                    Exited(id=new_id(), allocation=alloc, exit_code=-int(sig), reason=reason, run=entry.run)))
            elif entry.pid > 0:  # (else being spawned: signalled as it gets its pid, _spawned)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(entry.pid, sig)
        if waiting is not None or entry is not None:
            self._save()
        return signalled


def exit_reason(entry: Running, code: int | None) -> str:
    """``terminated`` or ``killed`` when the agent signalled it; ``oom`` when it failed and the kernel
    killed a process of its cgroup for memory; else ``completed`` (exit code 0) or ``failed``."""
    if entry.signalled:
        return entry.signalled
    if code == 0:
        return "completed"
    return "oom" if cgroups.oom_kills(entry.cgroup) else "failed"
