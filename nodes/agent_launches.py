"""Each start is saved before its process exists, so that an agent killed right after spawning it
(before it could save the process's pid) neither loses the work nor runs it twice.

Before each spawn the agent saves the allocation's entry in its state file with no pid yet, the
start frame, and a launch name; the launcher (nodes/agent_run.py) first claims the file of that
name in ``agent-launches/`` of the work directory, writing its pid there, and only then runs the
command. A restarted agent that finds such an entry claims the file itself: if the launcher came
first, the file holds its pid and the agent takes the process back as any other; if the agent
did, the launcher, whenever it comes, runs nothing, and the agent makes the start again (or
reports it stopped, when a terminate or kill had come for it meanwhile). Only one of the two can
create the file: the command runs once.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

LAUNCHES = "agent-launches"
# How long the file of a start given up is kept: a launcher slower than that to come would run.
KEEP_GIVEN_UP_S = 3600.0
_NAME = re.compile(r"[0-9a-f]{32}")


def is_name(name: str) -> bool:
    """Whether ``name`` can be a launch's (a state file may have been edited: never a path)."""
    return bool(_NAME.fullmatch(name))


def pid_file(workdir: Path, name: str) -> Path:
    if not is_name(name):
        raise ValueError(f"not a launch name: {name!r}")
    return workdir / LAUNCHES / name


def new(workdir: Path) -> tuple[str, Path]:
    """A new launch: its name and the file its launcher is to claim (the directory the agent's
    alone, as its state files are)."""
    (workdir / LAUNCHES).mkdir(mode=0o700, exist_ok=True)
    name = secrets.token_hex(16)
    return name, pid_file(workdir, name)


def claim(workdir: Path, name: str) -> int | None:
    """The pid of the launcher that claimed launch ``name``, or None when it had not yet: the
    agent has claimed it now, so that launcher, if it ever comes, runs nothing."""
    path = pid_file(workdir, name)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        return None
    except FileExistsError:
        pass
    text = path.read_text().strip()  # (a launcher writes its whole pid at once; the agent, nothing)
    pid = int(text) if text.isdigit() else 0
    return pid if 0 < pid < 2**31 else None


def forget(workdir: Path, name: str) -> None:
    """Launch ``name``'s file, once its process is gone (never one of a start given up: ``sweep``)."""
    if is_name(name):
        with contextlib.suppress(OSError):
            pid_file(workdir, name).unlink()


def sweep(workdir: Path, keep: Iterable[str]) -> None:
    """Files of launches no process is known by any more and older than KEEP_GIVEN_UP_S: those of
    starts given up (kept meanwhile, as the claim that stops their launcher), and any left over."""
    keep = set(keep)
    with contextlib.suppress(OSError):
        for path in (workdir / LAUNCHES).iterdir():
            with contextlib.suppress(OSError):
                if path.name not in keep and path.stat().st_mtime < time.time() - KEEP_GIVEN_UP_S:
                    path.unlink()
