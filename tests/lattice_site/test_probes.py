"""Probes as a load balancer and Kubernetes send them: under production settings, over plain
HTTP and with an IP address as Host; readiness fails on each thing it checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.test import override_settings

from lattice_site import probes
from tests.conftest import ROOT
from tests.lattice_site.test_settings import PROD

# Production settings, Django's test client, no test environment (which would allow "testserver").
SCRIPT = r"""
import json
from django.core.management import call_command
from django.test import Client
client, out = Client(), {}
def status(method, path, host):
    r = getattr(client, method)(path, HTTP_HOST=host)
    body = json.loads(r.content) if r.get("Content-Type") == "application/json" else None
    return [r.status_code, r.get("Location"), body]
for host in ("10.1.2.3", "lattice.example.org"):
    for path in ("/healthz/live", "/healthz/ready", "/healthz", "/healthz/", "/healthz/live/", "/jobs/"):
        out[f"{path} {host}"] = status("get", path, host)
out["post live"] = status("post", "/healthz/live", "10.1.2.3")
call_command("migrate", verbosity=0)
out["ready migrated"] = status("get", "/healthz/ready", "10.1.2.3")
print("RESULT " + json.dumps(out))
"""


def test_probes_under_production_settings_over_http_with_an_ip_host(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "REDIS_URL")}
    env.update(PROD, DATABASE_URL=f"sqlite:///{tmp_path / 'fresh.sqlite3'}", LATTICE_VAR_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    for host in ("10.1.2.3", "lattice.example.org"):
        for path in ("/healthz/live", "/healthz/live/"):  # with or without the slash, no redirect
            assert out[f"{path} {host}"][:2] == [200, None]
        # A fresh database: it answers, but nothing is migrated yet.
        for path in ("/healthz/ready", "/healthz", "/healthz/"):
            code, location, body = out[f"{path} {host}"]
            assert (code, location) == (503, None)
            assert body["checks"] == {"database": "ok", "migrations": "failed"}
    assert out["/jobs/ 10.1.2.3"][0] == 400  # every other path keeps ALLOWED_HOSTS ...
    assert out["/jobs/ lattice.example.org"][:2] == [301, "https://lattice.example.org/jobs/"]  # ... and HTTPS
    assert out["post live"][0] == 405
    assert out["ready migrated"][0] == 200
    assert out["ready migrated"][2] == {"status": "ok", "checks": {"database": "ok", "migrations": "ok"}}


@pytest.mark.django_db
def test_ready_checks_redis_when_it_is_configured(client, monkeypatch):
    monkeypatch.setattr(probes, "_migrated", False)
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens there
        response = client.get("/healthz/ready")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "migrations": "ok", "redis": "failed"}
    assert client.get("/healthz/live").status_code == 200


@pytest.mark.redis
@pytest.mark.django_db
def test_ready_with_the_database_and_redis_up(client, settings):
    settings.REDIS_URL = os.environ["REDIS_URL"]
    response = client.get("/healthz/ready", HTTP_HOST="10.1.2.3")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "migrations": "ok", "redis": "ok"}


@pytest.mark.django_db
def test_ready_fails_when_the_database_does_not_answer(client, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("connection refused")

    monkeypatch.setattr(probes.connection, "cursor", broken)
    with override_settings(REDIS_URL=None):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "checks": {"database": "failed"}}
