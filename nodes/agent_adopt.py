"""The agent taking back, once restarted, what a previous run of it left (docs/agent-protocol.md,
the state files): the processes still running (those that ended meanwhile reported), the starts
saved before their spawn (nodes/agent_launches.py), and the starts that waited for GPUs. A mixin
of nodes/agent.py's Agent, over the work it runs (nodes/agent_work.py).

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from typing import Any

from nodes import agent_commands, agent_files, agent_launches, cgroups
from nodes.agent_work import Work, exit_reason
from nodes.processes import BOOT, Running, recorded_exit_code, same_process, started_ticks
from nodes.protocol import Exited, Started, new_id

log = logging.getLogger("lattice.agent")


class Adopting(Work):
    """What the agent does once, as it starts, before it connects (``adopt``)."""

    async def adopt(self) -> None:
        """Take back the processes a previous run of this agent started (report those that ended;
        a start it saved before its spawn is taken back too, or made again: ``_launched``), then
        the starts it had waiting for stopping processes to leave their GPUs."""
        self.restore_reports()  # first: sent before anything this run of the agent reports
        waiting = agent_files.saved_object(self.waiting_file)  # (read before the processes' save rewrites it)
        again: dict[str, Any] = {}  # starts saved before their spawn whose launcher never ran: made again
        for alloc, info in agent_files.saved_object(self.state_file).items():
            try:
                entry = agent_files.saved_entry(alloc, info)
            except (TypeError, KeyError, ValueError, AttributeError, OverflowError):  # by hand, or damaged
                log.warning("%s: cannot adopt allocation %r from %r: not a saved process", self.state_file,
                            alloc, info)
                continue
            if entry.boot and entry.boot != BOOT:  # saved before the node restarted: none of it runs
                entry.start = None
            if entry.start is not None and not self.simulate and not await self._launched(entry, again):
                continue
            # (pid 0 or below is no process of its own: kill() would reach the agent's group, or all;
            # a pid of an earlier boot, or of a process started since, is another's: same_process)
            if self.simulate or not same_process(entry):
                code = recorded_exit_code(entry.checkpoint_dir)
                kept = self.unacked.get(self.latest.get((alloc, entry.run), ""), {})
                if kept.get("type") != "exited":  # (else its exit was kept before the agent died)
                    await self.report(Exited(id=new_id(), allocation=alloc, exit_code=code,
                                             reason=exit_reason(entry, code), run=entry.run))
                cgroups.remove(entry.cgroup)
                agent_launches.forget(self.workdir, entry.launch)
                continue
            self.running[alloc] = entry
            entry.task = asyncio.get_running_loop().create_task(self._watch_adopted(entry))
            if entry.signalled == "terminated":
                # Its kill after the grace went with the agent that was terminating it; the control
                # plane may never send one (a checkpointed victim's), and what waits for its GPUs
                # would wait for ever: killed once a grace has passed from now.
                asyncio.get_running_loop().create_task(self._kill_after(alloc, agent_commands.DEFAULT_GRACE_S))
        agent_launches.sweep(self.workdir, (e.launch for e in self.running.values()))
        self.restoring = {**again, **waiting}  # (saved with the waiting starts until each is made)
        self._save()
        await self._restore_waiting()

    async def _launched(self, entry: Running, again: dict[str, Any]) -> bool:
        """``entry`` was saved before its spawn, never with its pid (the agent died in between):
        whether its launcher ran. If it did, its pid is in ``entry``, reported started, and the
        process is taken back as any other; if not, it never will (nodes/agent_launches.py), and
        the start is made again (put in ``again``), or reported stopped when a terminate or kill
        came for it meanwhile."""
        pid = agent_launches.claim(self.workdir, entry.launch)
        if pid is not None:
            entry.pid, entry.start, entry.since = pid, None, started_ticks(pid)
            await self.report(Started(id=new_id(), allocation=entry.allocation, pid=pid, run=entry.run))
            if entry.signalled:  # the stop that came while it was spawned, which that agent never sent
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL if entry.signalled == "killed" else signal.SIGTERM)
            return True
        cgroups.remove(entry.cgroup)
        if entry.signalled:
            await self.report(Exited(id=new_id(), allocation=entry.allocation, exit_code=None,
                                     reason=entry.signalled, run=entry.run))
        else:
            log.info("%s: starting allocation %s again: its process never ran", self.state_file, entry.allocation)
            again[entry.allocation] = entry.start
        return False

    async def _restore_waiting(self) -> None:
        """The starts a previous run of this agent had waiting (``adopt``): each waits again for
        what still holds its GPUs, or starts. One that fails is logged and the others go on, as a
        frame the agent cannot act on is: the agent is starting, and its saved waits are not all
        saved again yet."""
        for alloc, frame in list(self.restoring.items()):
            del self.restoring[alloc]  # (on disk until the next save: then running, waiting, or reported)
            try:  # checked again as it was when it came: the file may have been edited or damaged
                frame = agent_commands.command(json.dumps(frame))
            except agent_commands.Ignored as exc:
                log.warning("%s: not starting allocation %r: %s", self.waiting_file, alloc, exc)
                continue
            if frame.get("type") != "start" or str(frame.get("allocation")) != alloc:
                continue
            try:
                await self._start(frame)
            except Exception:
                log.exception("%s: could not start allocation %s", self.waiting_file, alloc)
        self._save()  # (what was refused or already runs leaves the waits now)

    async def _watch_adopted(self, entry: Running) -> None:
        while same_process(entry):
            await asyncio.sleep(0.5)
        code = recorded_exit_code(entry.checkpoint_dir)
        await self._gone(entry, code)
