"""The real node agent (``nodes.agent``) as the fault test runs it, with two harness additions:
every exit it reports is appended to a file, with the report's frame id (the ground truth the
invariants are checked against: which runs ended with exit 0; the id tells when the control
plane has applied the report), and its reconnect backoff is capped lower, so agents
come back within seconds of their server instead of up to 30 s later.

    python -m tests.system.recording_agent RECORD_FILE BACKOFF_CAP_S -- AGENT ARGS...
"""

from __future__ import annotations

import json
import sys

from nodes import agent
from nodes.protocol import Exited, Report


def main(argv: list[str]) -> int:
    record, cap, _, *agent_argv = argv
    agent.BACKOFF_CAP_S = float(cap)

    class Recording(agent.Agent):
        async def report(self, report: Report) -> None:
            if isinstance(report, Exited):
                with open(record, "a") as out:
                    out.write(json.dumps({"id": report.id, "allocation": report.allocation,
                                          "exit_code": report.exit_code, "reason": report.reason}) + "\n")
            await super().report(report)

    agent.Agent = Recording  # type: ignore[misc]
    return agent.main(agent_argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
