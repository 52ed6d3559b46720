"""manage.py metrics_token: a bearer token for the metrics scraper and the digest Lattice keeps."""

from __future__ import annotations

import secrets
from typing import Any

from django.core.management.base import BaseCommand

from scheduling.models.secrets import digest


class Command(BaseCommand):
    help = ("Make a scrape token: Lattice is given only its SHA-256 (METRICS_TOKEN_SHA256), the "
            "scraper the token (printed once, alone on the last line).")

    def handle(self, *args: Any, **options: Any) -> None:
        token = f"lmt_{secrets.token_urlsafe(32)}"
        self.stderr.write(f"METRICS_TOKEN_SHA256={digest(token)}")
        self.stderr.write("Give the scraper this bearer token (shown once; store it now):")
        self.stdout.write(token)
