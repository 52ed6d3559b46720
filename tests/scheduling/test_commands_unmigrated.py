"""Management commands that read the database, run against one that was never migrated (the
first thing a new operator may do): exit 2 naming what to run, no traceback, nothing written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SAMPLES = ROOT / "scheduling" / "replay" / "samples"
COMMANDS = {
    "agent_token": ["agent_token", "gpu-a"],
    "api_token": ["api_token", "alice"],
    "check_invariants": ["check_invariants"],
    "seed_demo": ["seed_demo"],
    "run_scheduler": ["run_scheduler"],
    "demo_traffic": ["demo_traffic"],
    "run_agent_fleet": ["run_agent", "--simulate-all"],
    "replay_history": ["replay", "-", "--format", "lattice", "--cluster", str(SAMPLES / "cluster-small.json"),
                       "--policy", str(SAMPLES / "class_cost.json")],
    "replay_group": ["replay", str(SAMPLES / "NASA-iPSC-1993-3.1-cln.first3000.swf"), "--group", "batch"],
}


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=list(COMMANDS))
def test_a_command_on_an_unmigrated_database_says_to_migrate(argv, tmp_path):
    db = tmp_path / "empty.sqlite3"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**env, "DATABASE_URL": f"sqlite:///{db}", "LATTICE_VAR_DIR": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "migration(s) not applied" in done.stderr and "python manage.py migrate" in done.stderr
    tables = sqlite3.connect(db).execute("select name from sqlite_master where type = 'table'").fetchall()
    assert tables in ([], [("django_migrations",)])  # what Django's migration check itself may make


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=list(COMMANDS))
def test_a_command_on_a_database_it_cannot_reach_says_why(argv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**env, "DATABASE_URL": f"sqlite:///{tmp_path / 'no-such-dir' / 'db.sqlite3'}",
                               "LATTICE_VAR_DIR": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "cannot read the database" in done.stderr
