"""Launcher the agent runs each allocation under: ``python -m nodes.agent_run EXIT_FILE -- CMD...``.

It shares the allocation's process group, ignores the checkpoint hint and the
terminate signal itself (the application gets them), and writes the command's
exit code to EXIT_FILE, so an agent restarted mid-run can adopt the process and
still learn how it ended.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


def _defaults() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.stderr.write("usage: python -m nodes.agent_run EXIT_FILE -- CMD [ARGS...]\n")
        return 2
    exit_file = Path(sys.argv[1])
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        child = subprocess.Popen(sys.argv[3:], preexec_fn=_defaults)  # noqa: PLW1509 (signal reset only)
    except OSError as exc:
        exit_file.write_text("127")
        sys.stderr.write(f"cannot run {sys.argv[3]}: {exc}\n")
        return 127
    code = child.wait()
    exit_file.write_text(str(code))
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
