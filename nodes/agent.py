"""The Lattice node agent (docs/agent-protocol.md).

    lattice-agent --url ws://HOST/ws/agent/ --token-file PATH [--workdir DIR] [--simulate]   (python -m nodes.agent)

Runs each allocation's command as a process group with LATTICE_ALLOCATION_ID,
LATTICE_CHECKPOINT_DIR and LATTICE_RESUME in its environment; a checkpoint hint
is SIGUSR1 to the group, and the application answers by creating DONE (or
FAILED with a message) in its checkpoint directory, reporting PROGRESS and
asking to DEFER there meanwhile (nodes/checkpoint_files.py). ``terminate`` is SIGTERM,
then SIGKILL after the grace. The agent reconnects with exponential backoff and
jitter (capped at 30 s, back to 1 s only once a connection was welcomed), sends the
reports made while disconnected (the latest per allocation and run, kept until acknowledged), then says
``hello`` with what it runs. A revoked token (4401) stops it (exit 3) unless ``--retry-revoked``;
another agent holding the node (4409) makes it wait minutes. Settings that cannot work (the token
file, ``--url``, the work directory) are exit 2 before it connects; a frame it cannot act on is
logged and skipped (nodes/agent_commands.py). ``--simulate`` runs no processes:
allocations are timers. Work whose tenant maps no Unix user is refused unless
``--unmapped-as-agent`` (never as root without the tenant's allow_root: nodes/runas.py).

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import signal
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import websockets

from nodes import agent_commands, agent_files, cgroups, devices
from nodes.agent_adopt import Adopting
from nodes.processes import Running, Waiting
from nodes.protocol import Heartbeat, Hello, Report, encode, new_id
from scheduling.version import version

log = logging.getLogger("lattice.agent")
VERSION = version()
BACKOFF_CAP_S = 30.0
LONG_BACKOFF_S = 300.0  # after 4409 (another agent holds the node), or 4401 with --retry-revoked
CLOSE_REVOKED, CLOSE_REPLACED = 4401, 4409
EXIT_REVOKED = 3


class Agent(Adopting):
    devices: list[dict[str, Any]] | None = None  # the node's GPUs, reported in every hello
    nvml: Any = None  # an initialised pynvml-like module (tests inject a fake); None: nodes/devices.py finds one
    xid_set: Any = None  # NVML's event set for Xids (False: NVML cannot deliver them)
    # Work that maps no Unix user runs as the agent itself (nodes/runas.py): only on the node
    # operator's word (--unmapped-as-agent), as it could read the agent's token.
    unmapped_as_agent = False

    def __init__(self, url: str, token: str, workdir: Path, simulate: bool = False,
                 sim_seconds: float = 3600.0, retry_revoked: bool = False, cgroup_root: str | None = None) -> None:
        self.url = url
        # Per-allocation limits (nodes/cgroups.py): probed at the first hello; the note says why not.
        self.cgroup_root = cgroup_root
        self.limiter: cgroups.Limiter | None = None
        self.cgroups_note: str | None = None
        self.retry_revoked = retry_revoked
        self.welcomed = False  # this connection was welcomed: the control plane took the hello
        self.token = token
        self.workdir = workdir
        self.simulate = simulate
        self.sim_seconds = sim_seconds
        self.running: dict[str, Running] = {}
        self.waiting: dict[str, Waiting] = {}
        self.restoring: dict[str, Any] = {}
        self.unacked: dict[str, dict[str, Any]] = {}  # frame id -> frame, until acknowledged
        # (allocation, run) -> id of its latest unacknowledged frame: one run's report never
        # replaces another's (an earlier run's exit, which the control plane ignores, would hide it)
        self.latest: dict[tuple[str, int], str] = {}
        self.heartbeat_interval = 10.0
        self.seq = 0  # the last heartbeat's seq: each next one is greater, whatever the clock does
        self.ws: Any = None
        self.stopping = asyncio.Event()
        self.state_file = workdir / "agent-state.json"

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
            if self.nvml is None:
                self.nvml = devices.load_nvml()
            self.devices = devices.discover(self.nvml)
        self._probe_limits()
        return encode(Hello(id=new_id(), agent_version=VERSION, capacity={}, labels={},
                            running=[{"allocation": r.allocation, "phase": r.phase, "pid": r.pid,
                                      **({"run": r.run} if r.run else {})} for r in self.running.values()]
                            # (also beside its allocation's earlier run still leaving: listed alone,
                            # that run would have the control plane count the one waiting lost)
                            + [{"allocation": a, "phase": "waiting", **({"run": w.run} if w.run else {})}
                               for a, w in sorted(self.waiting.items())],
                            devices=self.devices, cgroups=self.limiter is not None,
                            cgroups_note=self.cgroups_note or ""))

    def _probe_limits(self) -> None:
        """Whether each allocation can run in its own limited cgroup; once, at the first hello."""
        if self.limiter is not None or self.cgroups_note is not None:
            return
        if self.simulate:
            self.cgroups_note = "a simulated agent runs no processes"
            return
        try:
            self.limiter = cgroups.Limiter.probe(self.cgroup_root)
        except cgroups.Unavailable as exc:
            self.cgroups_note = str(exc)[:255]
            log.warning("allocations run without limits: %s", exc)
        else:
            log.info("each allocation is limited in its own cgroup under %s", self.limiter.root)

    async def _heartbeats(self, ws: Any) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            await self._send_now(encode(Heartbeat(id=new_id(), seq=self.next_seq(), running=sorted(self.running),
                                                  gpus=self._gpu_health())))

    def next_seq(self) -> int:
        """Milliseconds since the epoch, or one more than the last when the clock was stepped back
        (an NTP correction): a seq at or below the last accepted one would be refused until the
        clock caught up, and the node would fall silent. After a restart the hello resets the
        node's sequence, so a clock behind the previous run's does not matter either."""
        self.seq = max(self.seq + 1, int(time.time() * 1000))
        return self.seq

    def _gpu_health(self) -> list[dict[str, Any]] | None:
        """What NVML says of the GPUs now (nodes/devices.py), Xids since the last heartbeat; None
        without NVML (a simulated agent, nvidia-smi only, a CPU node)."""
        if self.nvml is None or self.simulate:
            return None
        try:
            if self.xid_set is None:
                self.xid_set = devices.xid_watch(self.nvml) or False
            seen = devices.xid_events(self.nvml, self.xid_set) if self.xid_set else {}
            return devices.health(self.nvml, seen)
        except Exception as exc:  # an NVML error: this heartbeat goes without health
            log.warning("GPU health unavailable: %s", exc)
            return None

    async def _reader(self, ws: Any) -> None:
        async for text in ws:
            try:
                frame = agent_commands.command(text)
            except agent_commands.Ignored as exc:
                log.warning("ignored a frame from the control plane (%s): %.200r", exc, text)
                continue
            try:
                await self.handle(frame)
            except Exception:  # one frame the agent could not act on must not end the agent
                log.exception("could not act on a %s frame for allocation %s", frame.get("type"),
                              frame.get("allocation", "-"))

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
                    self._kill_after(frame["allocation"], agent_commands.grace_s(frame)))
        elif kind == "kill":
            self._signal(frame["allocation"], signal.SIGKILL, "killed")

    # -- reports (kept until acknowledged; the latest per allocation and run while disconnected) -
    async def report(self, report: Report) -> None:
        """Send a report now if connected; keep it until acknowledged, the latest per allocation and run."""
        await self.send_kept(self.keep(report))

    def keep(self, report: Report) -> dict[str, Any]:
        """Keep ``report`` until acknowledged, in memory and on disk (a restarted agent sends it)."""
        frame = encode(report)
        self._keep_frame(frame)
        self._save_reports()
        return frame

    def _keep_frame(self, frame: dict[str, Any]) -> None:
        key = (frame["allocation"], frame.get("run", 0))
        older = self.latest.get(key)
        if older is not None and self.ws is None:
            self.unacked.pop(older, None)  # superseded while disconnected
        self.latest[key] = frame["id"]
        self.unacked[frame["id"]] = frame

    async def send_kept(self, frame: dict[str, Any]) -> None:
        if self.ws is not None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await self._send_now(frame)

    def restore_reports(self) -> None:
        """The reports an earlier run of this agent made and never had acknowledged."""
        for frame in agent_files.saved_reports(self.reports_file):
            self._keep_frame(frame)

    def _save_reports(self) -> None:
        try:
            agent_files.write_private(self.reports_file, list(self.unacked.values()))
        except OSError as exc:  # kept in memory all the same: sent unless the agent dies first
            log.warning("%s: reports not saved: %s", self.reports_file, exc)

    async def _send_now(self, frame: dict[str, Any]) -> None:
        if self.ws is not None:
            await self.ws.send(json.dumps(frame))

    def _acked(self, frame_id: str | None) -> None:
        frame = self.unacked.pop(frame_id or "", None)
        if frame is None:
            return
        key = (frame.get("allocation", ""), frame.get("run", 0))
        if self.latest.get(key) == frame_id:
            self.latest.pop(key, None)
        self._save_reports()

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
    parser.add_argument("--sim-seconds", type=sim_seconds, default=3600.0)
    parser.add_argument("--retry-revoked", action="store_true",
                        help=f"on a revoked token, keep trying every {LONG_BACKOFF_S:.0f} s or so instead of "
                             f"exiting {EXIT_REVOKED}")
    parser.add_argument("--cgroup-root", default=os.environ.get("LATTICE_CGROUP_ROOT") or None,
                        help="the delegated cgroup v2 each allocation gets a limited child of (absolute, or "
                             "relative to the cgroup v2 mount); default LATTICE_CGROUP_ROOT, else the agent's own")
    parser.add_argument("--unmapped-as-agent", action="store_true",
                        help="run work whose tenant maps no Unix user as this agent's own user (a single-user "
                             "node; the work can read the agent's token). Never as root: there the tenant "
                             "needs allow_root")
    parser.add_argument("--log-level", default="INFO", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        token, workdir = _settings(args.url, args.token_file, args.workdir)
    except ValueError as exc:  # settings that cannot work however often it is started: exit 2, once
        sys.stderr.write(f"lattice-agent: {exc}\n")
        return 2
    agent = Agent(args.url, token, workdir, args.simulate, args.sim_seconds, args.retry_revoked, args.cgroup_root)
    agent.unmapped_as_agent = args.unmapped_as_agent
    return asyncio.run(_serve(agent))


TOKEN_FILE_LIMIT = 4096


def sim_seconds(text: str) -> float:
    """``--sim-seconds``: how long a simulated job runs, a finite number of seconds, at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds of at least 0")
    return value


def url_problem(url: str) -> str | None:
    """What makes ``--url`` unusable, or None: not ws:// or wss://, no host, or a port the connection
    would refuse with a traceback (not a number, past 65535) or an unclosed [IPv6 address."""
    try:
        parts = urllib.parse.urlsplit(url)
        usable = parts.scheme in ("ws", "wss") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:
        usable = False
    return None if usable else f"--url {url!r} is not a ws:// or wss:// URL (ws://HOST/ws/agent/)"


def _settings(url: str, token_file: str, workdir: str) -> tuple[str, Path]:
    """The token and the work directory, checked with the URL before the first connection."""
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(problem)
    try:
        with open(token_file, "rb") as f:
            token = f.read(TOKEN_FILE_LIMIT + 1).decode().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the token file {token_file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"the token file {token_file} is not text: is it the right file?") from None
    if not token:
        raise ValueError(f"the token file {token_file} is empty")
    if len(token) > TOKEN_FILE_LIMIT or not (token.isascii() and token.isprintable()) or " " in token:
        raise ValueError(f"the token file {token_file} does not hold one token (one line, no spaces)")
    path = Path(workdir).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot make the work directory {path}: {exc.strerror}") from None
    return token, path


async def _serve(agent: Agent) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.stop)
    await agent.adopt()
    return await agent.run()


if __name__ == "__main__":
    sys.exit(main())
