"""Per-allocation limits through a delegated cgroup v2 subtree (docs/agent-protocol.md, Limits).

The agent is given a cgroup it may manage (``--cgroup-root`` or ``LATTICE_CGROUP_ROOT``; by
default its own, which systemd delegates with ``Delegate=yes``). At start it checks that the
cgroup is on a cgroup v2 hierarchy, that the ``memory`` and ``cpu`` controllers are available
there, and enables them for its children (moving itself into a leaf ``agent`` child first when it
lives in that cgroup, as cgroup v2 keeps processes out of inner cgroups). Each allocation then
runs in its own child ``alloc-<id>`` with ``cpu.max`` (its CPUs, as quota per 100 ms period) and
``memory.max`` (its memory, GiB; swap off where the kernel offers ``memory.swap.max``). When its
process is gone, ``memory.events``' ``oom_kill`` count says whether the kernel killed it for
memory, and the child is removed. Where any of this is not possible, the probe says why, the
agent reports ``cgroups: false`` with that reason in ``hello`` and runs work without limits.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("lattice.agent")
CONTROLLERS = ("memory", "cpu")
LEAF = "agent"  # the child the agent itself lives in, beside the allocations' children
PERIOD_US = 100_000
MOUNTS = Path("/proc/self/mounts")
SELF_CGROUP = Path("/proc/self/cgroup")


class Unavailable(Exception):
    """Why the agent cannot limit allocations with cgroups (said in hello, shown on the node page)."""


def cgroup2_mount(mounts: Path = MOUNTS) -> Path:
    """Where the cgroup v2 hierarchy is mounted (the first cgroup2 mount)."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError as exc:
        raise Unavailable(f"cannot read {mounts}: {exc.strerror}") from None
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            return Path(parts[1])
    raise Unavailable("no cgroup v2 hierarchy is mounted (cgroup v1 only)")


def own_cgroup(mount: Path, self_cgroup: Path = SELF_CGROUP) -> Path:
    """The agent's own cgroup v2 (the ``0::/path`` line of /proc/self/cgroup)."""
    for line in self_cgroup.read_text().splitlines():
        if line.startswith("0::"):
            return mount / line[3:].lstrip("/")
    raise Unavailable("the agent is in no cgroup v2")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise Unavailable(f"cannot read {path}: {exc.strerror}") from None


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise Unavailable(f"cannot write {value.strip()!r} to {path}: {exc.strerror}") from None


@dataclass
class Limiter:
    """A cgroup v2 subtree with memory and cpu enabled for its children."""

    root: Path

    @classmethod
    def probe(cls, root: str | None = None, mounts: Path = MOUNTS, self_cgroup: Path = SELF_CGROUP) -> Limiter:
        """A limiter for ``root`` (an absolute path, or relative to the cgroup v2 mount; None: the
        agent's own cgroup), ready to make children; raises Unavailable saying why not."""
        mount = cgroup2_mount(mounts)
        path = own_cgroup(mount, self_cgroup) if not root else (Path(root) if os.path.isabs(root) else mount / root)
        if not root and path.name == LEAF and path.parent != mount:
            path = path.parent  # already in its leaf: moved there earlier, or by systemd's DelegateSubgroup=agent
        if path != mount and mount not in path.parents:
            raise Unavailable(f"{path} is not under the cgroup v2 mount {mount}")
        if path == mount and not root:
            raise Unavailable("the agent runs in the root cgroup: give it a delegated one (systemd Delegate=yes) "
                              "or name one with --cgroup-root")
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise Unavailable(f"cannot create {path}: {exc.strerror}") from None
        try:
            return cls._ready(path, mount)
        except Unavailable:
            if created:  # leave nothing behind where it cannot be used
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise

    @classmethod
    def _ready(cls, path: Path, mount: Path) -> Limiter:
        missing = set(CONTROLLERS) - set(_read(path / "cgroup.controllers").split())
        if missing and path != mount:  # a subtree of our own making: ask the parent to pass them down
            with contextlib.suppress(Unavailable):
                _write(path.parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))
            missing = set(CONTROLLERS) - set(_read(path / "cgroup.controllers").split())
        if missing:
            available = _read(path / "cgroup.controllers").split()
            raise Unavailable(f"the {' and '.join(sorted(missing))} controller(s) are not available in {path} "
                              f"(available: {', '.join(available) or 'none'}; not delegated, or bound to cgroup v1)")
        procs = _read(path / "cgroup.procs").split()
        if procs and path != mount:  # processes may not stay in a cgroup whose children are limited
            if procs != [str(os.getpid())]:
                raise Unavailable(f"{path} holds other processes than the agent ({len(procs)}); give it its own")
            (path / LEAF).mkdir(exist_ok=True)
            _write(path / LEAF / "cgroup.procs", str(os.getpid()))
        _write(path / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
        return cls(path)

    def child(self, allocation: str) -> Path:
        return self.root / f"alloc-{allocation}"

    def make(self, allocation: str, cpu: float, memory_gib: float) -> Path:
        """The allocation's cgroup, limited to its request (0: no limit on that resource)."""
        path = self.child(allocation)
        try:
            path.mkdir(exist_ok=True)
        except OSError as exc:
            raise Unavailable(f"cannot create {path}: {exc.strerror}") from None
        _write(path / "cpu.max", cpu_max(cpu))
        _write(path / "memory.max", memory_max(memory_gib))
        if (path / "memory.swap.max").exists() and memory_gib > 0:
            _write(path / "memory.swap.max", "0")  # past its memory it is killed, not swapped out
        return path


def cpu_max(cpu: float) -> str:
    """``cpu.max`` for ``cpu`` CPUs: the quota per period, or no limit."""
    return f"{max(1000, round(cpu * PERIOD_US))} {PERIOD_US}" if cpu > 0 else f"max {PERIOD_US}"


def memory_max(memory_gib: float) -> str:
    return str(int(memory_gib * 2**30)) if memory_gib > 0 else "max"


def oom_kills(cgroup: Path | None) -> int:
    """How many processes of the cgroup the kernel killed for memory (0 when unknown)."""
    if cgroup is None:
        return 0
    try:
        text = (cgroup / "memory.events").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def remove(cgroup: Path | None) -> None:
    """Remove an allocation's cgroup once its process is gone (whatever it left behind killed)."""
    if cgroup is None or not cgroup.exists():
        return
    with contextlib.suppress(OSError):
        if (cgroup / "cgroup.kill").exists():
            (cgroup / "cgroup.kill").write_text("1")
    try:
        cgroup.rmdir()
    except OSError as exc:
        log.warning("cannot remove %s: %s", cgroup, exc.strerror)
