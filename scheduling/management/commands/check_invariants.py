"""manage.py check_invariants: check what must always hold of the stored state (scheduling/invariants.py).

    manage.py check_invariants [--grace-seconds 30] [--accepted 12,13,14]

Prints each violation under its invariant's name and exits 1 naming the violated ones;
exits 0 with "all invariants hold" otherwise.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from scheduling import invariants
from scheduling.management.arguments import seconds
from scheduling.management.database import DatabaseCommand


def _ids(raw: str) -> list[int]:
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--accepted takes allocation ids separated by commas, not {raw!r}",
                           returncode=2) from None


class Command(DatabaseCommand):
    help = "Check the invariants of the stored state; exit 1 naming each one violated."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--grace-seconds", type=seconds(positive=False), default=invariants.DEFAULT_DEADLINE_GRACE_S,
                            help="how far past its deadline a leaving allocation may be (a sweep's time)")
        parser.add_argument("--accepted", default="",
                            help="allocation ids the API accepted, which must all be stored")

    def handle(self, *args: Any, **options: Any) -> None:
        results = invariants.check_all(accepted_ids=_ids(options["accepted"]), grace_s=options["grace_seconds"])
        for name, found in results.items():
            for violation in found:
                self.stdout.write(f"{name}: {violation}")
        bad = invariants.violated(results)
        if bad:
            raise CommandError(f"violated: {', '.join(bad)}", returncode=1)
        self.stdout.write("all invariants hold")
