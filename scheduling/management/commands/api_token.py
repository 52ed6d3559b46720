"""manage.py api_token USER: issue an API token; it is printed once, alone on the last line.
manage.py api_token USER --revoke [PREFIX]: revoke the user's tokens (or the one with PREFIX)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from scheduling.actions.tokens import api_token_issue, api_token_revoke
from scheduling.management.database import DatabaseCommand
from scheduling.models.secrets import PREFIX_LEN


class Command(DatabaseCommand):
    help = "Issue an API token for a user (stored hashed; shown only now)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--revoke", nargs="?", const="", default=None, metavar="PREFIX",
                            help="revoke the user's tokens instead (only the one starting with PREFIX)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}", returncode=2)
        if options["revoke"] is not None:
            prefix = options["revoke"] or None
            count = api_token_revoke(user=user, prefix=prefix[:PREFIX_LEN] if prefix else None)
            if prefix and not count:
                raise CommandError(f"{user.username} has no unrevoked token starting {prefix!r}", returncode=2)
            self.stdout.write(f"revoked {count} token(s) of {user.username}")
            return
        token = api_token_issue(user=user)
        self.stderr.write(f"API token for {user.username} (shown once; store it now):")
        self.stdout.write(token)
