"""The database a management command reads must be Lattice's, migrated: otherwise the command says
so and exits 2, instead of failing on the first missing table with a traceback."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor


def require_migrated(using: str = DEFAULT_DB_ALIAS) -> None:
    """Raise CommandError (exit 2) when the database cannot be reached or has migrations not
    applied, naming the first of them and what to run."""
    try:
        executor = MigrationExecutor(connections[using])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        raise CommandError(f"cannot read the database: {exc}".strip(), returncode=2) from None
    if plan:
        first = plan[0][0]
        raise CommandError(f"the database is not ready: {len(plan)} migration(s) not applied, the first "
                           f"{first.app_label}.{first.name}; run `python manage.py migrate` first", returncode=2)


class DatabaseCommand(BaseCommand):
    """A command that reads the database: it is checked (``require_migrated``) before the command
    runs, before any transaction of its own begins."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        require_migrated()
        return super().execute(*args, **options)
