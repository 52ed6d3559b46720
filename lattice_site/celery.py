"""The Celery app. Tasks are thin: ids in, one action called."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lattice_site.settings.dev")

app = Celery("lattice")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
