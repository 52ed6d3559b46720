"""Launcher the agent runs each allocation under:
``python -m nodes.agent_run EXIT_FILE [--uid U --gid G --groups G1,G2] [--cgroup DIR] [--pid-file F] -- CMD...``.

It shares the allocation's process group, ignores the checkpoint hint and the
terminate signal itself (the application gets them), and writes the command's
exit code to EXIT_FILE, so an agent restarted mid-run can adopt the process and
still learn how it ended. With ``--uid``, the command runs as that user: the group, the
supplementary groups and the user are set in the child just before it executes the command
(nodes/runas.py), so the launcher itself can still write EXIT_FILE. With ``--cgroup``, the launcher
first moves itself into that cgroup (the allocation's, nodes/cgroups.py), so the command and all it
starts are limited from their first instruction. With ``--pid-file``, the launcher first claims
that file, writing its pid there (whole, and only if no one has claimed it yet): an agent killed
after spawning it but before recording its pid finds it there once restarted, or, having claimed
the file itself first, knows the command never ran and never will (the launcher then exits, having
run nothing and written no EXIT_FILE).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def _defaults() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _options(options: list[str]) -> dict[str, Any] | None:
    """Popen's user=, group=, extra_groups= from ``--uid U --gid G --groups A,B``, and ``cgroup``
    from ``--cgroup DIR``, ``pid_file`` from ``--pid-file F`` (None: bad options)."""
    pairs = dict(zip(options[::2], options[1::2], strict=False))
    if len(options) % 2 or set(pairs) - {"--uid", "--gid", "--groups", "--cgroup", "--pid-file"}:
        return None
    found: dict[str, Any] = {}
    for option, name in (("--cgroup", "cgroup"), ("--pid-file", "pid_file")):
        if option in pairs:
            found[name] = pairs.pop(option)
    if not pairs:
        return found
    try:
        return {**found, "user": int(pairs["--uid"]), "group": int(pairs["--gid"]),
                "extra_groups": [int(g) for g in pairs.get("--groups", "").split(",") if g]}
    except (KeyError, ValueError):
        return None


def _claim(pid_file: Path) -> bool:
    """Write this launcher's pid to ``pid_file`` unless someone claimed it first (the agent, which
    gave the start up): linked from a whole temporary file, so a reader never sees half a pid."""
    tmp = pid_file.with_name(f"{pid_file.name}.{os.getpid()}")
    tmp.write_text(str(os.getpid()))
    try:
        os.link(tmp, pid_file)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    return True


def _record(exit_file: Path, code: int) -> None:
    """Write ``code`` to ``exit_file``, in a directory the job's user owns: never through what the
    job left there (a link to a file of root's, which the launcher would write over as root). A new
    file of a name no one knew, then renamed over the name: a rename replaces a link, never follows it."""
    tmp = exit_file.with_name(f"{exit_file.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(str(code))
    os.replace(tmp, exit_file)


def main() -> int:
    cut = sys.argv.index("--") if "--" in sys.argv else -1
    who = _options(sys.argv[2:cut]) if cut >= 2 else None
    if who is None or len(sys.argv) <= cut + 1:
        sys.stderr.write("usage: python -m nodes.agent_run EXIT_FILE [--uid U --gid G --groups A,B] [--cgroup DIR] "
                         "[--pid-file F] -- CMD...\n")
        return 2
    exit_file = Path(sys.argv[1])
    pid_file = who.pop("pid_file", None)
    if pid_file is not None and not _claim(Path(pid_file)):
        sys.stderr.write(f"not running {sys.argv[cut + 1]}: its agent gave this start up before it began\n")
        return 0
    cgroup = who.pop("cgroup", None)
    if cgroup is not None:
        try:
            Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
        except OSError as exc:  # not run unlimited when it was to be limited
            _record(exit_file, 125)
            sys.stderr.write(f"cannot enter the cgroup {cgroup}: {exc}\n")
            return 125
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        child = subprocess.Popen(sys.argv[cut + 1:], preexec_fn=_defaults, **who)  # noqa: PLW1509 (signal reset only)
    except OSError as exc:
        _record(exit_file, 127)
        sys.stderr.write(f"cannot run {sys.argv[cut + 1]}: {exc}\n")
        return 127
    code = child.wait()
    _record(exit_file, code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
