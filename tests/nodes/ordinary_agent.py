"""The real node agent (``nodes.agent.main``) running as an ordinary Unix user, for the tests that
need one: started as root, it imports what the agent needs, then drops to the user (no
supplementary groups, the user's group, its uid) before the agent reads its token. The import
first is for machines whose Python lives where only root may read; the agent's own code runs
unchanged, as that user.

    python -m tests.nodes.ordinary_agent USER -- AGENT_ARGS...
"""

from __future__ import annotations

import os
import pwd
import sys


def main(argv: list[str]) -> int:
    user, _, *agent_argv = argv
    import websockets.asyncio.client  # noqa: F401 (imported while the interpreter's files can be read)

    from nodes import agent

    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    return agent.main(agent_argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
