"""manage.py run_agent: the node agent (same as ``python -m nodes.agent``), or a simulated fleet.

    manage.py run_agent --url ws://127.0.0.1:8000/ws/agent/ --token-file PATH [--simulate] [--unmapped-as-agent]
    manage.py run_agent --simulate-all --url ws://127.0.0.1:8000/ws/agent/   # every node, one process
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes import agent, devices
from nodes.actions import agent_token_simulated
from nodes.models import Node
from scheduling.management.database import require_migrated


class Command(BaseCommand):
    help = "Run the node agent, or simulated agents for every node (demos and load tests)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="ws://127.0.0.1:8000/ws/agent/")
        parser.add_argument("--token-file")
        parser.add_argument("--workdir", default=str(settings.VAR_DIR / "agent"))
        parser.add_argument("--simulate", action="store_true")
        parser.add_argument("--unmapped-as-agent", action="store_true",
                            help="run work whose tenant maps no Unix user as this agent's user (the agent's own option)")
        parser.add_argument("--simulate-all", action="store_true",
                            help="run a simulated agent for every node, each with a fresh token (replacing "
                                 "only the tokens earlier simulated agents were given)")
        parser.add_argument("--sim-seconds", type=agent.sim_seconds, default=600.0)

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["simulate_all"]:
            if not options["token_file"]:
                raise CommandError("--token-file is required (or use --simulate-all)", returncode=2)
            argv = ["--url", options["url"], "--token-file", options["token_file"], "--workdir", options["workdir"],
                    "--sim-seconds", str(options["sim_seconds"])]
            flags = [f"--{name.replace('_', '-')}" for name in ("simulate", "unmapped_as_agent") if options[name]]
            raise SystemExit(agent.main(argv + flags))
        problem = agent.url_problem(options["url"])
        if problem is not None:
            raise CommandError(problem, returncode=2)
        require_migrated()  # the fleet is read from the nodes, and issued tokens
        fleet = []
        for node in Node.objects.order_by("name"):
            workdir = Path(options["workdir"]) / node.name
            workdir.mkdir(parents=True, exist_ok=True)
            simulated = agent.Agent(options["url"], agent_token_simulated(node=node), workdir, simulate=True,
                                    sim_seconds=options["sim_seconds"])
            simulated.devices = devices.simulated(node.gpu, node=node.name)  # the node page shows them
            fleet.append(simulated)
        self.stdout.write(f"running {len(fleet)} simulated agents against {options['url']}")
        asyncio.run(_run_all(fleet))


async def _run_all(fleet: list[agent.Agent]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: [a.stop() for a in fleet])
    await asyncio.gather(*(a.run() for a in fleet))
