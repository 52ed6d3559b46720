"""manage.py agent_token NODE: issue a token for the node's agent, printed once on the last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.management.database import DatabaseCommand


class Command(DatabaseCommand):
    help = "Issue an agent token for a node (stored hashed; shown only now)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("node")

    def handle(self, *args: Any, **options: Any) -> None:
        node = Node.objects.filter(name=options["node"]).first()
        if node is None:
            raise CommandError(f"no node {options['node']!r}", returncode=2)
        token = agent_token_issue(node=node)
        self.stderr.write(f"agent token for {node.name} (shown once; store it now):")
        self.stdout.write(token)
