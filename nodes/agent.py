"""The Lattice node agent (docs/agent-protocol.md).

    lattice-agent --url ws://HOST/ws/agent/ --token-file PATH [--workdir DIR] [--simulate]   (python -m nodes.agent)

Runs each allocation's command as a process group with LATTICE_ALLOCATION_ID,
LATTICE_CHECKPOINT_DIR and LATTICE_RESUME in its environment; a checkpoint hint
is SIGUSR1 to the group, and the application answers by creating DONE (or
FAILED with a message) in its checkpoint directory, reporting PROGRESS and
asking to DEFER there meanwhile (nodes/checkpoint_files.py). ``terminate`` is SIGTERM,
then SIGKILL after the grace. The agent reconnects with exponential backoff and
jitter (capped at 30 s, back to 1 s only once a connection was welcomed), sends the
reports made while disconnected (the latest per allocation, kept until acknowledged), then says
``hello`` with what it runs. A revoked token (4401) stops it (exit 3) unless ``--retry-revoked``;
another agent holding the node (4409) makes it wait minutes. ``--simulate`` runs no processes:
allocations are timers.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import websockets

from nodes import devices, runas
from nodes.checkpoint_files import CheckpointFiles, done_location, size_of
from nodes.processes import EXIT_FILE, Running, alive, recorded_exit_code
from nodes.protocol import CheckpointDone, Exited, Heartbeat, Hello, Report, Started, encode, new_id
from scheduling.version import version

log = logging.getLogger("lattice.agent")
VERSION = version()
BACKOFF_CAP_S = 30.0
LONG_BACKOFF_S = 300.0  # after 4409 (another agent holds the node), or 4401 with --retry-revoked
CLOSE_REVOKED, CLOSE_REPLACED = 4401, 4409
EXIT_REVOKED = 3


class Agent:
    devices: list[dict[str, Any]] | None = None  # the node's GPUs, reported in every hello
    nvml: Any = None  # an initialised pynvml-like module (tests inject a fake); None: nodes/devices.py finds one

    def __init__(self, url: str, token: str, workdir: Path, simulate: bool = False,
                 sim_seconds: float = 3600.0, retry_revoked: bool = False) -> None:
        self.url = url
        self.retry_revoked = retry_revoked
        self.welcomed = False  # this connection was welcomed: the control plane took the hello
        self.token = token
        self.workdir = workdir
        self.simulate = simulate
        self.sim_seconds = sim_seconds
        self.running: dict[str, Running] = {}
        self.unacked: dict[str, dict[str, Any]] = {}  # frame id -> frame, until acknowledged
        self.latest: dict[str, str] = {}  # allocation -> id of its latest unacknowledged frame
        self.heartbeat_interval = 10.0
        self.ws: Any = None
        self.stopping = asyncio.Event()
        self.state_file = workdir / "agent-state.json"

    # -- surviving our own restart ------------------------------------------------------------
    def _save(self) -> None:
        data = {a: {"pid": r.pid, "checkpoint_dir": str(r.checkpoint_dir)} for a, r in self.running.items()}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.state_file)

    async def adopt(self) -> None:
        """Take back the processes a previous run of this agent started; report those that ended."""
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        for alloc, info in data.items():
            entry = Running(alloc, pid=int(info["pid"]), checkpoint_dir=Path(info["checkpoint_dir"]))
            if self.simulate or not alive(entry.pid):
                code = recorded_exit_code(entry.checkpoint_dir)
                await self.report(Exited(id=new_id(), allocation=alloc, exit_code=code,
                                         reason="completed" if code == 0 else "failed"))
                continue
            self.running[alloc] = entry
            entry.task = asyncio.get_running_loop().create_task(self._watch_adopted(entry))
        self._save()

    async def _watch_adopted(self, entry: Running) -> None:
        while alive(entry.pid):
            await asyncio.sleep(0.5)
        self.running.pop(entry.allocation, None)
        self._save()
        code = recorded_exit_code(entry.checkpoint_dir)
        reason = entry.signalled or ("completed" if code == 0 else "failed")
        await self.report(Exited(id=new_id(), allocation=entry.allocation, exit_code=code, reason=reason))

    # -- connection ----------------------------------------------------------------------
    async def run(self) -> int:
        backoff = 1.0
        while not self.stopping.is_set():
            self.welcomed = False
            code = await self._session()
            if self.stopping.is_set():
                break
            if self.welcomed:  # a real session ended: start again from a short wait
                backoff = 1.0
            if code == CLOSE_REVOKED and not self.retry_revoked:
                log.error("the token was revoked: stopping (get a new token, or --retry-revoked)")
                return EXIT_REVOKED
            if code in (CLOSE_REVOKED, CLOSE_REPLACED):
                delay = LONG_BACKOFF_S * (0.5 + random.random() / 2)
                if code == CLOSE_REPLACED:
                    log.error("another agent holds this node (4409); trying again in %.0f s", delay)
            else:
                delay = min(BACKOFF_CAP_S, backoff) * (0.5 + random.random() / 2)
                backoff = min(BACKOFF_CAP_S, backoff * 2)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=delay)
        return 0

    async def _session(self) -> int | None:
        """One connection, from connecting to its close; the close code, if one came."""
        code = None
        try:
            async with websockets.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"},
                                          max_size=2**20, open_timeout=10, close_timeout=2) as ws:
                self.ws = ws
                if not self.stopping.is_set():  # stopped while connecting: the block's exit closes it
                    await self.greet()
                    # Heartbeats stop with the connection: a clean close ends the reader, and
                    # waiting for the next heartbeat to fail held a stopping agent up to 10 s.
                    beats = asyncio.create_task(self._heartbeats(ws))
                    try:
                        await self._reader(ws)
                    finally:
                        beats.cancel()
                    code = ws.close_code
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
        except (TimeoutError, OSError, websockets.InvalidHandshake) as exc:
            log.warning("cannot reach %s: %s", self.url, exc)
            return None
        finally:
            self.ws = None
        log.warning("connection closed (%s)", code)
        return code

    async def greet(self) -> None:
        """The first frames of a connection: the reports kept while disconnected, then hello. The
        control plane reconciles at hello, counting work placed here that the agent no longer runs
        as lost (failed, and requeued); work that ended meanwhile must be reported before that."""
        for frame in list(self.unacked.values()):
            await self._send_now(frame)
        await self._send_now(self._hello())

    def _hello(self) -> dict[str, Any]:
        # Discovered once (nodes/devices.py). A simulated agent reports what it is given, or nothing:
        # its node's devices are then unknown and its registered capacity stands.
        if self.devices is None and not self.simulate:
            self.devices = devices.discover(self.nvml)
        return encode(Hello(id=new_id(), agent_version=VERSION, capacity={}, labels={},
                            running=[{"allocation": r.allocation, "phase": r.phase, "pid": r.pid}
                                     for r in self.running.values()],
                            devices=self.devices, cgroups=False))  # no per-allocation limits yet

    async def _heartbeats(self, ws: Any) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            # Milliseconds since the epoch: increasing across restarts of the agent too.
            await self._send_now(encode(Heartbeat(id=new_id(), seq=int(time.time() * 1000),
                                                  running=sorted(self.running))))

    async def _reader(self, ws: Any) -> None:
        async for text in ws:
            await self.handle(json.loads(text))

    async def handle(self, frame: dict[str, Any]) -> None:
        """One frame from the control plane, in the order they arrive."""
        kind = frame.get("type")
        if kind == "ack":
            self._acked(frame.get("id"))
        elif kind == "error":
            log.warning("refused %s: %s %s", frame.get("id"), frame.get("code"), frame.get("message"))
            self._acked(frame.get("id"))
        elif kind == "welcome":
            self.welcomed = True
            self.heartbeat_interval = float(frame.get("heartbeat_interval_s", 10))
        elif kind == "start":
            await self._start(frame)
        elif kind == "checkpoint":
            asyncio.get_running_loop().create_task(self._checkpoint(frame["allocation"]))
        elif kind == "terminate":
            # Signalled before the next frame is read: a start that follows is a new run.
            if self._signal(frame["allocation"], signal.SIGTERM, "terminated"):
                asyncio.get_running_loop().create_task(
                    self._kill_after(frame["allocation"], float(frame["grace_s"])))
        elif kind == "kill":
            self._signal(frame["allocation"], signal.SIGKILL, "killed")

    # -- reports (kept until acknowledged; the latest per allocation while disconnected) ---------
    async def report(self, report: Report) -> None:
        """Send a report now if connected; keep it until acknowledged, the latest per allocation."""
        frame = encode(report)
        older = self.latest.get(report.allocation)
        if older is not None and self.ws is None:
            self.unacked.pop(older, None)  # superseded while disconnected
        self.latest[report.allocation] = report.id
        self.unacked[report.id] = frame
        if self.ws is not None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await self._send_now(frame)

    async def _send_now(self, frame: dict[str, Any]) -> None:
        if self.ws is not None:
            await self.ws.send(json.dumps(frame))

    def _acked(self, frame_id: str | None) -> None:
        frame = self.unacked.pop(frame_id or "", None)
        if frame is not None and self.latest.get(frame.get("allocation", "")) == frame_id:
            self.latest.pop(frame["allocation"], None)

    # -- running work ----------------------------------------------------------------------
    async def _start(self, frame: dict[str, Any]) -> None:
        alloc = str(frame["allocation"])
        old = self.running.get(alloc)
        if old is not None and old.signalled and old.task is not None:
            # A new run of an allocation whose earlier run is still being stopped (it was
            # checkpointed and requeued, then placed here again): start it once that one is gone.
            asyncio.get_running_loop().create_task(self._start_after(old.task, frame))
            return
        if old is not None:
            return  # a repeated start (after a reconnect): it already runs
        ckpt = self.workdir / frame.get("checkpoint_dir", f"checkpoints/{alloc}")
        try:  # who it runs as, where, seeing what (nodes/runas.py); refused before anything is made
            launch = runas.prepare(frame, alloc, ckpt, self.workdir, ckpt / EXIT_FILE)
        except runas.Refused as exc:
            log.warning("not starting %s: %s", alloc, exc)
            await self.report(Exited(id=new_id(), allocation=alloc, exit_code=None, reason=exc.reason))
            return
        entry = Running(alloc, checkpoint_dir=ckpt)
        self.running[alloc] = entry
        if self.simulate:
            entry.task = asyncio.get_running_loop().create_task(self._simulated(entry))
            await self.report(Started(id=new_id(), allocation=alloc, pid=0))
            return
        (ckpt / EXIT_FILE).unlink(missing_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(*launch.argv, env=launch.env, cwd=launch.cwd,
                                                        start_new_session=True)
        except OSError as exc:
            self.running.pop(alloc, None)
            await self.report(Exited(id=new_id(), allocation=alloc, exit_code=None, reason="failed"))
            log.warning("cannot start %s: %s", alloc, exc)
            return
        entry.pid = proc.pid
        entry.task = asyncio.get_running_loop().create_task(self._watch(entry, proc))
        self._save()
        await self.report(Started(id=new_id(), allocation=alloc, pid=proc.pid))

    async def _start_after(self, previous: asyncio.Task[Any], frame: dict[str, Any]) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(previous)
        await self._start(frame)

    async def _watch(self, entry: Running, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        if self.running.get(entry.allocation) is entry:
            self.running.pop(entry.allocation)
        self._save()
        code = recorded_exit_code(entry.checkpoint_dir)
        if code is None:
            code = proc.returncode
        reason = entry.signalled or ("completed" if code == 0 else "failed")
        await self.report(Exited(id=new_id(), allocation=entry.allocation, exit_code=code, reason=reason))

    async def _simulated(self, entry: Running) -> None:
        try:
            await asyncio.sleep(self.sim_seconds)
        except asyncio.CancelledError:
            return
        self.running.pop(entry.allocation, None)
        await self.report(Exited(id=new_id(), allocation=entry.allocation, exit_code=0, reason="completed"))

    async def _checkpoint(self, alloc: str) -> None:
        entry = self.running.get(alloc)
        if entry is None or entry.phase == "checkpointing":
            # A repeated hint (re-sent at hello) while this run already checkpoints: one watcher,
            # or a second one would clear what the application wrote and report it twice.
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
            await self._relay(alloc, files)
            await asyncio.sleep(0.2)
        await self._relay(alloc, files)  # what was written just before DONE goes first
        if done.exists():
            location = done_location(entry.checkpoint_dir)
            size = size_of(location)
            await self.report(CheckpointDone(id=new_id(), allocation=alloc, ok=True, location=location,
                                             size_bytes=size or 0))
        elif failed.exists():
            await self.report(CheckpointDone(id=new_id(), allocation=alloc, ok=False,
                                             location=str(entry.checkpoint_dir), error=failed.read_text()[:500]))

    async def _relay(self, alloc: str, files: CheckpointFiles) -> None:
        """The application's PROGRESS and DEFER files, each change reported once."""
        for frame in files.poll(alloc):
            await self.report(frame)

    async def _kill_after(self, alloc: str, grace: float) -> None:
        entry = self.running.get(alloc)
        await asyncio.sleep(grace)
        if entry is not None and self.running.get(alloc) is entry:
            self._signal(alloc, signal.SIGKILL, "killed")

    def _signal(self, alloc: str, sig: signal.Signals, reason: str) -> bool:
        entry = self.running.get(alloc)
        if entry is None:
            return False
        entry.signalled = reason
        if self.simulate:
            if entry.task is not None:
                entry.task.cancel()
            self.running.pop(alloc, None)
            asyncio.get_running_loop().create_task(self.report(
                Exited(id=new_id(), allocation=alloc, exit_code=-int(sig), reason=reason)))
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(entry.pid, sig)
        return True

    def stop(self) -> None:  # the processes keep running: a restarted agent adopts them
        self.stopping.set()
        if self.ws is not None:
            asyncio.get_running_loop().create_task(self.ws.close())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lattice-agent", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    parser.add_argument("--url", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--sim-seconds", type=float, default=3600.0)
    parser.add_argument("--retry-revoked", action="store_true",
                        help=f"on a revoked token, keep trying every {LONG_BACKOFF_S:.0f} s or so instead of "
                             f"exiting {EXIT_REVOKED}")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        token = Path(args.token_file).read_text().strip()
    except OSError as exc:
        sys.stderr.write(f"cannot read the token file {args.token_file}: {exc.strerror}\n")
        return 2
    if not token:
        sys.stderr.write(f"the token file {args.token_file} is empty\n")
        return 2
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_serve(Agent(args.url, token, workdir, args.simulate, args.sim_seconds, args.retry_revoked)))


async def _serve(agent: Agent) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.stop)
    await agent.adopt()
    return await agent.run()


if __name__ == "__main__":
    sys.exit(main())
