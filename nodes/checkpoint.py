"""Report a checkpoint to the Lattice agent from an application: progress, deferral, done, failed.

    python -m nodes.checkpoint progress 40 [--eta 120]
    python -m nodes.checkpoint defer 60
    python -m nodes.checkpoint done [--location PATH]
    python -m nodes.checkpoint failed "message"

or, from Python, ``from nodes.checkpoint import progress, defer, done, failed``. Each writes one
file atomically in ``LATTICE_CHECKPOINT_DIR`` (which the agent sets for every allocation), and
the agent relays it to the control plane (docs/agent-protocol.md, "Writing a checkpointing
application"). Standard library only; exits 2 with a message on bad arguments or without
``LATTICE_CHECKPOINT_DIR``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from nodes.checkpoint_files import (
    DEFER,
    DONE,
    FAILED,
    MAX_DEFER_S,
    PROGRESS,
    format_defer,
    format_progress,
    is_location,
    write_atomic,
)

ENV = "LATTICE_CHECKPOINT_DIR"


class CheckpointError(ValueError):
    """A bad argument, or no checkpoint directory to write to."""


def checkpoint_dir() -> Path:
    value = os.environ.get(ENV, "")
    if not value:
        raise CheckpointError(f"{ENV} is not set: run this inside an allocation started by the Lattice agent")
    path = Path(value)
    if not path.is_dir():
        raise CheckpointError(f"{ENV} is {value}, which is not a directory")
    return path


def _finite(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CheckpointError(f"{what} must be a finite number, not {value!r}")
    return float(value)


def progress(percent: float, eta_s: float | None = None) -> Path:
    """The checkpoint is ``percent`` (0 to 100) done, ``eta_s`` seconds to go (optional)."""
    percent = _finite(percent, "percent")
    if not 0 <= percent <= 100:
        raise CheckpointError(f"percent must be between 0 and 100, not {percent:g}")
    if eta_s is not None and _finite(eta_s, "eta") < 0:
        raise CheckpointError(f"eta must not be negative, not {eta_s:g}")
    return write_atomic(checkpoint_dir(), PROGRESS, format_progress(percent, eta_s))


def defer(seconds: int) -> Path:
    """Ask for ``seconds`` more before the checkpoint deadline (granted up to the group's cap)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_DEFER_S:
        raise CheckpointError(f"seconds must be a whole number from 0 to {MAX_DEFER_S}, not {seconds!r}")
    return write_atomic(checkpoint_dir(), DEFER, format_defer(seconds))


def done(location: str | None = None) -> Path:
    """The checkpoint is complete; it is in the checkpoint directory, or at ``location`` (a path,
    made absolute, or a URL)."""
    text = ""
    if location is not None:
        location = location.strip()
        if not location or "\n" in location:
            raise CheckpointError("location must be one non-empty line")
        text = (location if is_location(location) else os.path.abspath(location)) + "\n"
    return write_atomic(checkpoint_dir(), DONE, text)


def failed(message: str) -> Path:
    """The checkpoint failed; ``message`` says why (its first 500 characters reach the control plane)."""
    if not message.strip():
        raise CheckpointError("a message saying why the checkpoint failed is required")
    return write_atomic(checkpoint_dir(), FAILED, message)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nodes.checkpoint",
                                     description="Report a checkpoint to the Lattice agent.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("progress", help="the checkpoint is PERCENT done")
    p.add_argument("percent", type=float)
    p.add_argument("--eta", type=float, default=None, help="seconds still needed")
    d = sub.add_parser("defer", help="ask for SECONDS more before the deadline")
    d.add_argument("seconds", type=int)
    k = sub.add_parser("done", help="the checkpoint is complete")
    k.add_argument("--location", default=None, help="where it is, if not in LATTICE_CHECKPOINT_DIR")
    f = sub.add_parser("failed", help="the checkpoint failed")
    f.add_argument("message")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 with usage on bad arguments
    try:
        if args.command == "progress":
            progress(args.percent, args.eta)
        elif args.command == "defer":
            defer(args.seconds)
        elif args.command == "done":
            done(args.location)
        else:
            failed(args.message)
    except CheckpointError as exc:
        sys.stderr.write(f"python -m nodes.checkpoint: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
