"""The real node agent (``nodes.agent``), killed (SIGKILL, by itself) right after it spawns its
first job's process: the crash a test needs inside the window between that spawn and the agent's
own record of the process, made certain rather than left to timing. Everything else is the agent
unchanged; the agent started again after it is the plain one.

    python -m tests.nodes.crashing_agent AGENT_ARGS...
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from nodes import agent


def main(argv: list[str]) -> int:
    spawn = asyncio.create_subprocess_exec

    async def spawn_then_die(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await spawn(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # the process runs; nothing after the spawn happens
        return proc

    asyncio.create_subprocess_exec = spawn_then_die  # type: ignore[assignment]
    return agent.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
