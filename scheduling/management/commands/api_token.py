"""manage.py api_token USER: issue an API token; it is printed once, alone on the last line."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.actions.tokens import api_token_issue


class Command(BaseCommand):
    help = "Issue an API token for a user (stored hashed; shown only now)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}", returncode=2)
        token = api_token_issue(user=user)
        self.stderr.write(f"API token for {user.username} (shown once; store it now):")
        self.stdout.write(token)
