"""The files an application writes in its checkpoint directory, and how the agent reads them.

An application answers a checkpoint hint (SIGUSR1) without any network client, by creating
small files in ``LATTICE_CHECKPOINT_DIR`` (docs/agent-protocol.md, "Writing a checkpointing
application"):

| file | content | the agent sends |
|---|---|---|
| ``PROGRESS`` | ``PERCENT [ETA_SECONDS]``, e.g. ``40`` or ``40 120`` | ``checkpoint_progress``, once per change |
| ``DEFER`` | ``SECONDS``, a whole number, e.g. ``60`` | ``defer``, once per file written (the agent takes the file) |
| ``DONE`` | anything; a first line that is an absolute path or a URL is the location | ``checkpoint_done`` with ``ok: true`` |
| ``FAILED`` | a message | ``checkpoint_done`` with ``ok: false`` |

Each file should be written atomically: to a temporary name in the same directory, then
renamed (``write_atomic``; ``python -m nodes.checkpoint`` does it). Standard library only: the
agent and the applications import it on compute nodes.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import stat
import tempfile
from pathlib import Path

from nodes.protocol import CheckpointProgress, Defer, Report, new_id

log = logging.getLogger("lattice.agent")

PROGRESS = "PROGRESS"
DEFER = "DEFER"
DONE = "DONE"
FAILED = "FAILED"
# Files of an earlier checkpoint of the same allocation (the directory outlives a resume).
STALE = (DONE, FAILED, PROGRESS, DEFER)
TAKEN = ".DEFER.taken"  # where the agent moves a DEFER file it is reading
MAX_DEFER_S = 2**31 - 1  # the protocol's bound on ``defer.seconds``
MAX_READ = 4096


class BadContent(ValueError):
    """A file's content is not in its format; the message says what is wrong."""


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadContent(f"{what} must be a number, not {text!r}") from None
    if not math.isfinite(value):
        raise BadContent(f"{what} must be a finite number, not {text!r}")
    return value


def _plain(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def parse_progress(text: str) -> tuple[int | float, int | float | None]:
    """``PERCENT [ETA_SECONDS]`` -> (percent 0..100, eta >= 0 or None)."""
    parts = text.split()
    if not 1 <= len(parts) <= 2:
        raise BadContent("PROGRESS holds a percent and an optional ETA in seconds, e.g. '40' or '40 120'")
    percent = _number(parts[0], "the percent")
    if not 0 <= percent <= 100:
        raise BadContent(f"the percent must be between 0 and 100, not {parts[0]}")
    eta = _number(parts[1], "the ETA") if len(parts) == 2 else None
    if eta is not None and eta < 0:
        raise BadContent(f"the ETA must not be negative, not {parts[1]}")
    return _plain(percent), None if eta is None else _plain(eta)


def parse_defer(text: str) -> int:
    """``SECONDS`` -> a whole number of seconds, 0 to 2^31-1."""
    parts = text.split()
    if len(parts) != 1 or not parts[0].isdigit():
        raise BadContent(f"DEFER holds a whole number of seconds, e.g. '60', not {text.strip()!r}")
    seconds = int(parts[0])
    if seconds > MAX_DEFER_S:
        raise BadContent(f"the seconds must be at most {MAX_DEFER_S}")
    return seconds


def format_progress(percent: float, eta_s: float | None = None) -> str:
    text = f"{_plain(float(percent))}" + ("" if eta_s is None else f" {_plain(float(eta_s))}")
    parse_progress(text)  # what is written is what the agent reads
    return text + "\n"


def format_defer(seconds: int) -> str:
    text = str(seconds)
    parse_defer(text)
    return text + "\n"


def write_atomic(directory: Path, name: str, text: str) -> Path:
    """Write ``directory/name`` so that a reader sees the old file or the whole new one, never a
    part: a temporary file in the same directory, flushed, then renamed over the name."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / name


def read_plain(path: Path) -> str:
    """Up to MAX_READ characters of ``path``, a plain file and not a link (else OSError): the
    directory is the job's user's, and the agent may run as root. A link to a file of root's was
    read and its start reported to the control plane; a FIFO blocked the agent for good."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a plain file")
        return f.read(MAX_READ).decode("utf-8", errors="replace")


_read = read_plain
MAX_SIZE_ENTRIES = 100_000  # a checkpoint's tree sized at most this many entries (size_of)


class CheckpointFiles:
    """The agent's side for one checkpoint of one allocation: ``clear`` before the hint, then
    ``poll`` turns what the application wrote since the last poll into report frames (without
    ``id`` and ``allocation``, which the agent adds)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._progress_seen: tuple[int, int, int] | None = None

    def clear(self) -> None:
        for name in (*STALE, TAKEN):
            (self.dir / name).unlink(missing_ok=True)
        self._progress_seen = None

    def poll(self, allocation: str, run: int = 0) -> list[Report]:
        """The application's new requests for ``allocation`` (this ``run`` of it), as the frames that
        carry them."""
        return [frame for frame in (self._defer(allocation, run), self._progress(allocation, run)) if frame is not None]

    def _progress(self, allocation: str, run: int) -> CheckpointProgress | None:
        path = self.dir / PROGRESS
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        # A change is a new file (a rename) or new content: the inode, the time and the size.
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        if seen == self._progress_seen:
            return None
        self._progress_seen = seen
        try:
            percent, eta = parse_progress(_read(path))
        except (OSError, BadContent) as exc:
            log.warning("%s: ignored: %s", path, exc)
            return None
        return CheckpointProgress(id=new_id(), allocation=allocation, percent=percent, eta_s=eta, run=run)

    def _defer(self, allocation: str, run: int) -> Defer | None:
        # Taken by a rename: a request written meanwhile is a new DEFER, read on the next poll.
        taken = self.dir / TAKEN
        try:
            os.replace(self.dir / DEFER, taken)
        except FileNotFoundError:
            return None
        try:
            seconds = parse_defer(_read(taken))
        except (OSError, BadContent) as exc:
            log.warning("%s: ignored: %s", self.dir / DEFER, exc)
            return None
        finally:
            taken.unlink(missing_ok=True)
        return Defer(id=new_id(), allocation=allocation, seconds=seconds, run=run)


def is_location(text: str) -> bool:
    """An absolute path or a URL: what DONE may name as the checkpoint's location (anything
    else in DONE, such as "ok", is not a location)."""
    return text.startswith("/") or "://" in text


def done_location(directory: Path) -> str:
    """Where the checkpoint is: DONE's first line when it is a location, else the directory."""
    try:
        lines = _read(directory / DONE).strip().splitlines()
    except OSError:
        lines = []
    first = lines[0].strip() if lines else ""
    return first if is_location(first) else str(directory)


def size_of(location: str) -> int | None:
    """The bytes at ``location`` when it is a file or directory on this node, else None. The job
    names it (DONE), and the agent may run as root: links are not followed, and a tree of more than
    MAX_SIZE_ENTRIES entries is not sized (None) rather than walked whole ("/" was, by the agent's
    event loop, every node's reports waiting meanwhile). Run in a thread."""
    path = Path(location)
    try:
        top = path.lstat()
        if stat.S_ISREG(top.st_mode):
            return top.st_size
        if not stat.S_ISDIR(top.st_mode):
            return None
        total, seen = 0, 0
        for root, dirs, files in os.walk(path, followlinks=False):
            seen += len(dirs) + len(files)
            if seen > MAX_SIZE_ENTRIES:
                return None
            for name in files:
                with contextlib.suppress(OSError):
                    info = os.lstat(os.path.join(root, name))
                    total += info.st_size if stat.S_ISREG(info.st_mode) else 0
        return total
    except OSError:
        return None
    return None
