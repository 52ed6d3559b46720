"""Every bench's --quick runs to the end and prints its goal table, so none can rot.

Benches are not tests (their figures are read, not asserted: docs/benchmarks.md); this runs each
script that takes --quick as a subprocess, on databases of its own next to DATABASE_URL and the
Redis database REDIS_URL names, and checks it exits 0 and prints the table of its goals. The
figures themselves are not judged here: on a shared CI machine a smoke run's goals may be missed
or 'not valid'.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = "| goal | CPU time | wall clock | result |"
# The benches that print the shared goal table (bench/common.py print_table); any other script
# with --quick is run for its exit status.
TABLED = {"agents", "api", "decision", "live", "replay", "scheduler", "submissions", "usage"}


def _quick_benches() -> list[str]:
    return sorted(path.stem for path in (ROOT / "bench").glob("*.py") if '"--quick"' in path.read_text())


def test_the_benches_with_a_table_are_found():
    assert set(_quick_benches()) >= TABLED


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("name", _quick_benches())
def test_quick_bench_runs_and_prints_its_table(name):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, f"bench/{name}.py", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    if name in TABLED:
        lines = done.stdout.splitlines()
        assert TABLE in lines, tail
        rows = lines[lines.index(TABLE) + 2:]
        assert rows and all(row.startswith("| ") and row.rstrip().endswith(("holds |", "MISSED |", "not valid |"))
                            for row in rows if row.startswith("|")), tail
