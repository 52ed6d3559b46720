"""What the agent knows of the processes it runs: whether one is alive, the exit code its
launcher left (nodes/agent_run.py), and the agent's record of each run. Standard library and
nodes/checkpoint_files.py only."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from nodes.checkpoint_files import read_plain

EXIT_FILE = ".exit-code"


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields from the state on (the name before them may hold spaces and
    parentheses), or None where there is no such process or no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)  # a zombie is gone for our purposes
    return fields is None or fields[0] != "Z"


def started_ticks(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (0: not known). Saved with the pid,
    so that a pid another process took while the agent was down is not taken for the saved one."""
    fields = _stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 and fields[19].isdigit() else 0


def _boot() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


BOOT = _boot()  # this boot of the node ("" where not known): no process outlives it


def same_process(entry: Running) -> bool:
    """Whether ``entry``'s saved process still runs: saved in this boot (a reboot ended every
    process, and their pids are soon others'), alive, and started when the saved one did."""
    if entry.pid <= 0 or (entry.boot and entry.boot != BOOT) or not alive(entry.pid):
        return False
    return not entry.since or started_ticks(entry.pid) == entry.since


def recorded_exit_code(ckpt: Path) -> int | None:
    """The code the launcher recorded, or None. Read only as a plain file: the directory is the
    job's user's, and a FIFO the job left there under that name blocked the agent for good."""
    try:
        return int(read_plain(ckpt / EXIT_FILE).strip())
    except (OSError, ValueError):
        return None


@dataclass
class Running:
    allocation: str
    pid: int = 0
    phase: str = "running"
    signalled: str | None = None  # "terminated" or "killed" once we stopped it
    task: asyncio.Task[Any] | None = None
    checkpoint_dir: Path = field(default_factory=Path)
    cgroup: Path | None = None  # its own limited cgroup (nodes/cgroups.py), where the node has them
    devices: frozenset[str] = frozenset()  # the UUIDs of the GPUs bound to it (its start frame)
    run: int = 0  # which run of the allocation it is (its start frame's; 0: not given), named in reports
    # Its launch (nodes/agent_launches.py): the name of the file its launcher claims with its pid,
    # and, until the agent has recorded that pid, the start frame (a start given up is made again).
    launch: str = ""
    start: dict[str, Any] | None = None
    # Which process the pid is (same_process): the node's boot it was saved in, its start time.
    boot: str = ""
    since: int = 0


class Waiting(NamedTuple):
    """A start waiting for stopping processes to leave its GPUs: the task that starts it, and its
    frame (saved, so a restarted agent waits again)."""

    task: asyncio.Task[Any]
    frame: dict[str, Any]

    @property
    def run(self) -> int:
        return int(self.frame.get("run") or 0)


def device_uuids(devices: Any) -> frozenset[str]:
    """The UUIDs of a start frame's ``devices`` (checked by the frame parser: ``{index, uuid}``)."""
    return frozenset(str(d["uuid"]) for d in devices or () if isinstance(d, dict) and d.get("uuid"))
