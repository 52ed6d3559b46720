"""Who an allocation runs as on the node, and what it sees (docs/agent-protocol.md, ``start``).

A ``start`` may name a Unix ``user`` (and ``group``; blank: the user's primary group). The agent
then prepares the allocation's working and checkpoint directories owned by that user, mode 0700,
and the launcher (nodes/agent_run.py) drops to the user, its group and its supplementary groups
just before it executes the command, with a clean environment: PATH, HOME, USER, LOGNAME, SHELL,
LANG, the frame's ``env`` and the Lattice variables, nothing of the agent's own. A user or group
unknown on the node is refused (``exited`` reason ``user_unknown``), and so is uid 0 unless the
frame says the operator allowed root for the tenant (``refused``). Without a user the work would
run as the agent, able to read the agent's token and report for its node: refused as well, unless
the node's operator started the agent with ``--unmapped-as-agent`` (a single-user node: the
command then runs as the agent does, with the agent's environment) or, for an agent running as
root, the tenant may run as root. So is a mapping to the very user a non-root agent runs as, which
is the same work under another name, on the same terms. A simulated start runs nothing and is taken.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import grp
import os
import pwd
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.devices import visible_env

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # an ``exited`` reason: user_unknown or refused


@dataclass
class Identity:
    uid: int
    gid: int
    groups: list[int] = field(default_factory=list)
    name: str = ""
    home: str = "/"
    shell: str = "/bin/sh"

    def launcher_args(self) -> list[str]:
        """The options nodes.agent_run takes to drop to this identity."""
        return ["--uid", str(self.uid), "--gid", str(self.gid), "--groups", ",".join(map(str, self.groups))]


def resolve(user: str, group: str = "", allow_root: bool = False, *, runs: bool = True,
            unmapped_as_agent: bool = False) -> Identity | None:
    """The identity a frame names (None: none named, run as the agent). Raises Refused. Without a
    user the work would run as the agent: refused unless the node's operator said unmapped work may
    (``unmapped_as_agent``); where the agent runs as root, only if the operator allowed root for
    the tenant, whatever the node says. A user who is the agent's own (not root) is refused on the
    same terms (``runs`` False: a simulated start, which runs nothing)."""
    if not user:
        if runs and os.geteuid() == 0 and not allow_root:
            raise Refused("refused", "no Unix user is mapped for this work and the agent runs as root: "
                                     "map the tenant (or the member) to a user, or allow root for the tenant")
        if runs and os.geteuid() != 0 and not unmapped_as_agent:
            raise Refused("refused", "no Unix user is mapped for this work and this agent runs unmapped work "
                                     "only with --unmapped-as-agent: map the tenant (or the member) to a user")
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise Refused("user_unknown", f"no user {user!r} on this node") from None
    gid = entry.pw_gid
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise Refused("user_unknown", f"no group {group!r} on this node") from None
    if (entry.pw_uid == 0 or gid == 0) and not allow_root:
        raise Refused("refused", f"{user!r} is root (uid or gid 0), which this tenant may not run as")
    if runs and entry.pw_uid == os.geteuid() != 0 and not unmapped_as_agent:  # mapped, yet as the agent
        raise Refused("refused", f"{user!r} is the user this agent runs as, so the work could read its token: "
                                 "map the tenant (or the member) to another user")
    groups = sorted({g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {entry.pw_gid} - {gid})
    return Identity(entry.pw_uid, gid, groups, user, entry.pw_dir or "/", entry.pw_shell or "/bin/sh")


def own_dir(path: Path, who: Identity | None) -> None:
    """Create ``path`` (and its parents); when it is ``who``'s, owned by them, mode 0700."""
    path.mkdir(parents=True, exist_ok=True)
    if who is not None:
        os.chown(path, who.uid, who.gid)
        path.chmod(0o700)


def environment(who: Identity | None, frame_env: dict[str, Any], lattice: dict[str, str]) -> dict[str, str]:
    """The command's environment: the agent's own plus the frame's for no identity; otherwise a
    clean one. The Lattice variables come last, so the frame cannot override them."""
    extra = {str(k): str(v) for k, v in (frame_env or {}).items()}
    if who is None:
        return {**os.environ, **extra, **lattice}
    base = {"PATH": SAFE_PATH, "HOME": who.home, "USER": who.name, "LOGNAME": who.name, "SHELL": who.shell,
            "LANG": os.environ.get("LANG", "C.UTF-8")}
    return {**base, **extra, **lattice}


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str


def prepare(frame: dict[str, Any], who: Identity | None, alloc: str, ckpt: Path, workdir: Path, exit_file: Path,
            cgroup: Path | None = None, pid_file: Path | None = None) -> Launch:
    """Everything a ``start`` needs before its process, run as ``who`` (``resolve``'s answer, made
    once by the caller before anything else; None: as the agent): its directories (its own working
    directory when it runs as a user), its environment (its GPUs only, when the frame binds
    devices) and the launcher's command line (claiming ``pid_file`` first, when given, then
    entering ``cgroup``, when the node limits allocations)."""
    cwd = workdir / "work" / alloc if who is not None else workdir
    try:
        for path in (ckpt, cwd):
            own_dir(path, who)
    except OSError as exc:  # a full disk; an agent that is not root given a user to run as
        raise Refused("failed", f"cannot prepare {path}: {exc.strerror or exc}") from None
    lattice = {"LATTICE_ALLOCATION_ID": alloc, "LATTICE_CHECKPOINT_DIR": str(ckpt),
               "LATTICE_RESUME": "1" if frame.get("resume_from_checkpoint") else "0",
               **(visible_env(frame["devices"]) if "devices" in frame else {})}
    env = environment(who, frame.get("env") or {}, lattice)
    command = [str(c) for c in frame.get("command") or []] or [sys.executable, "-c", "import time; time.sleep(3600)"]
    # The launcher by its path: nothing of Lattice goes on the job's PYTHONPATH, installed or not.
    argv = [sys.executable, str(Path(__file__).with_name("agent_run.py")), str(exit_file),
            *(who.launcher_args() if who is not None else []), *(["--cgroup", str(cgroup)] if cgroup else []),
            *(["--pid-file", str(pid_file)] if pid_file else []), "--", *command]
    return Launch(argv, env, str(cwd))
