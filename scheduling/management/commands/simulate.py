"""manage.py simulate FILE.json: print the decision for a scenario document."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.engine import InvalidDocument, decide_scenario, parse_scenario

SCENARIO_FILE_KEYS = {"id", "rules", "why", "input", "expect", "reference_output"}


def unwrap_scenario_file(doc: Any) -> Any:
    """A worked-scenario file ({"input": ..., "expect": ...}) is decided on its input."""
    if isinstance(doc, dict) and "input" in doc and set(doc) <= SCENARIO_FILE_KEYS:
        return doc["input"]
    return doc


class Command(BaseCommand):
    help = "Decide a scenario document (docs/decisions.md) and print the decision as JSON."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the JSON document, or - for standard input")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}", returncode=2) from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})", returncode=2) from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path}: not valid JSON: {exc}", returncode=2) from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise CommandError(f"{path}: nested too deeply to be read", returncode=2) from None
        doc = unwrap_scenario_file(doc)
        try:
            scenario = parse_scenario(doc)
        except InvalidDocument as exc:
            for field, message in exc.errors:
                self.stderr.write(f"{field}: {message}")
            sys.exit(2)
        decision = decide_scenario(scenario)
        self.stdout.write(json.dumps(decision.to_dict(), indent=2, sort_keys=True))
