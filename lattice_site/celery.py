"""The Celery app. Tasks are thin: ids in, one action called."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

from lattice_site import gc_tuning

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lattice_site.settings.dev")

app = Celery("lattice")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _long_running(**_: Any) -> None:
    """The worker keeps each resource group's snapshot between passes (lattice_site/gc_tuning.py)."""
    gc_tuning.for_long_running_process()
