"""The agent's own files in its work directory: what runs (``agent-state.json``), the starts that
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

from nodes.protocol import BadFrame, Report, encode, parse

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
