"""The embedded mode's periodic loop: what Celery beat would run, in a thread of the web process.

Without Redis the channel layer lives in one process, so the sweep, deadlines and
passes must run where the browsers' and agents' sockets are for their events to
reach them. Started by the ASGI app when LATTICE_EMBEDDED_LOOP=1 (make run sets it).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections

from lattice_site.celery import app

log = logging.getLogger(__name__)
_started = threading.Event()


def start(interval: float = 2.0) -> None:
    if _started.is_set():
        return
    _started.set()
    threading.Thread(target=_loop, args=(interval,), name="lattice-periodic", daemon=True).start()


def _loop(interval: float) -> None:
    app.loader.import_default_modules()
    tasks = [app.tasks[entry["task"]] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    while True:
        for task in tasks:
            try:
                task.run()
            except Exception:  # keep the loop alive; the next round retries from the database
                log.exception("periodic task %s failed", task.name)
            finally:
                close_old_connections()
        time.sleep(interval)
