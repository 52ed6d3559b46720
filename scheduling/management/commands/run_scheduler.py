"""manage.py run_scheduler: the periodic tasks (sweep, passes, node liveness), for the embedded mode.

With Redis, Celery beat and workers do this; without, this loop does, in its own
process next to the web server. Stops cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser

from lattice_site.celery import app
from scheduling.management.arguments import seconds
from scheduling.management.database import DatabaseCommand


class Command(DatabaseCommand):
    help = "Run the sweep and a scheduler pass for every resource group, every few seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=seconds(positive=True), default=2.0)
        parser.add_argument("--once", action="store_true", help="one round, then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        stop = False

        def quit_(*_: Any) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, quit_)
        signal.signal(signal.SIGINT, quit_)
        app.loader.import_default_modules()
        periodic = [app.tasks[entry["task"]] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
        while not stop:
            for task in periodic:  # what Celery beat would run, in this process
                task.run()
            if options["once"]:
                return
            deadline = time.monotonic() + options["interval"]
            while not stop and time.monotonic() < deadline:
                time.sleep(0.1)
