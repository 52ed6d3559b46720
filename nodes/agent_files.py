"""The agent's own files in its work directory: what runs (``agent-state.json``, each process's
entry, and each start's from before its spawn: nodes/agent_launches.py), the starts that
wait (``agent-waiting.json``) and the reports not yet acknowledged (``agent-reports.json``).

Each is written whole to a temporary file and renamed over the old one, so a crash leaves the old
or the new, never half of one; each is the agent's alone (mode 0600): a waiting start holds its
command and env (a tenant's secrets, perhaps), and the work directory is open to the jobs' users
(their checkpoints are there). Reports are kept on disk so that an exit the agent reported just
before it died (its process already gone from the state file) is still sent by the agent restarted.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from nodes import agent_launches
from nodes.processes import Running
from nodes.protocol import SIGNALLED, BadFrame, Report, encode, is_run, parse

log = logging.getLogger("lattice.agent")


def write_private(path: Path, content: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(json.dumps(content))
    tmp.replace(path)


def saved_object(path: Path) -> dict[str, Any]:
    """A state file's object ({} when there is none, or it is not one)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def saved_reports(path: Path) -> list[dict[str, Any]]:
    """The reports kept by an earlier run of the agent, each checked as the control plane would
    check it (one edited or damaged is logged and left out), in the order they were made."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("%s: reports not read: %s", path, exc)
        return []
    kept = []
    for frame in data if isinstance(data, list) else []:
        try:
            report = parse(json.dumps(frame))
        except (BadFrame, TypeError, ValueError) as exc:
            log.warning("%s: report %r left out: %s", path, frame, exc)
            continue
        if isinstance(report, Report):
            kept.append(encode(report))
    return kept


def entry_record(entry: Running) -> dict[str, Any]:
    """``entry`` as ``agent-state.json`` keeps it (``saved_entry`` reads it back)."""
    return {"pid": entry.pid, "checkpoint_dir": str(entry.checkpoint_dir), "devices": sorted(entry.devices),
            "run": entry.run, **({"cgroup": str(entry.cgroup)} if entry.cgroup else {}),
            **({"signalled": entry.signalled} if entry.signalled else {}),
            **({"launch": entry.launch} if entry.launch else {}),
            **({"start": entry.start} if entry.start is not None else {}),
            **({"boot": entry.boot} if entry.boot else {}), **({"since": entry.since} if entry.since else {})}


def saved_entry(alloc: str, info: Any) -> Running:
    """An entry of ``agent-state.json`` (``entry_record``'s). Raises TypeError, KeyError,
    ValueError, AttributeError or OverflowError for one that is not (edited by hand, or damaged)."""
    launch, start = str(info.get("launch") or ""), info.get("start")
    if launch and not agent_launches.is_name(launch):
        raise ValueError(f"not a launch: {launch!r}")
    if start is not None and not (launch and isinstance(start, dict)):  # (a start is saved with its launch)
        raise ValueError(f"not a start: {start!r}")
    return Running(alloc, pid=int(info["pid"]), checkpoint_dir=Path(info["checkpoint_dir"]),
                   cgroup=Path(info["cgroup"]) if info.get("cgroup") else None,
                   devices=frozenset(map(str, info.get("devices") or ())), run=_run(info.get("run")),
                   signalled=info.get("signalled") if info.get("signalled") in SIGNALLED else None,
                   launch=launch, start=start, boot=str(info.get("boot") or ""), since=_ticks(info.get("since")))


def _ticks(saved: Any) -> int:
    """A saved start time (``processes.started_ticks``); anything else is taken as not known."""
    return saved if isinstance(saved, int) and not isinstance(saved, bool) and saved > 0 else 0


def _run(saved: Any) -> int:
    """A saved process's run as its reports may name it; one the control plane would refuse (so
    the agent's hello with it) is taken as not given."""
    return saved if is_run(saved) else 0
