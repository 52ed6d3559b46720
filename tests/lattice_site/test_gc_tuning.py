"""The long-running processes collect garbage less often (lattice_site/gc_tuning.py)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture
def restored_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_the_worker_tunes_collection_when_it_starts(restored_gc):
    from celery.signals import worker_init

    from lattice_site.celery import _long_running
    from lattice_site.gc_tuning import THRESHOLDS

    # Connected to worker_init; called directly, since sending the signal would also run
    # Celery's Django fixup, which expects a real worker and installs its handlers here.
    assert _long_running in [ref() for _, ref in worker_init.receivers]
    gc.set_threshold(700, 10, 10)
    _long_running(sender=None)
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() > 0


def test_the_asgi_server_tunes_collection_once_loaded():
    code = "import gc, lattice_site.asgi; print(*gc.get_threshold(), gc.get_freeze_count() > 0)"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "LATTICE_EMBEDDED_LOOP")}
    env["LATTICE_VAR_DIR"] = str(ROOT / "var" / "test-settings")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    from lattice_site.gc_tuning import THRESHOLDS

    assert result.stdout.split() == [*map(str, THRESHOLDS), "True"]
