"""``python -m nodes.checkpoint``, the application's side of a checkpoint: what it writes, how
it refuses bad arguments, and that a reader never sees half a file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from nodes import checkpoint
from nodes.checkpoint_files import parse_defer, parse_progress, write_atomic
from tests.conftest import ROOT


def _cli(*args: str, ckpt=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CHECKPOINT_DIR"}
    if ckpt is not None:
        env["LATTICE_CHECKPOINT_DIR"] = str(ckpt)
    return subprocess.run([sys.executable, "-m", "nodes.checkpoint", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)


def test_each_command_writes_its_file_in_the_checkpoint_directory(tmp_path):
    assert _cli("progress", "40", "--eta", "120", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "PROGRESS").read_text() == "40 120\n"
    assert _cli("progress", "62.5", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "PROGRESS").read_text() == "62.5\n"
    assert _cli("defer", "60", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "DEFER").read_text() == "60\n"
    assert _cli("failed", "disk full", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "FAILED").read_text() == "disk full"
    assert _cli("done", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "DONE").read_text() == ""
    assert _cli("done", "--location", "s3://bucket/run-7", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "DONE").read_text() == "s3://bucket/run-7\n"
    # a relative path is made absolute: the agent reads it from another directory
    assert _cli("done", "--location", "out/step-9", ckpt=tmp_path).returncode == 0
    assert (tmp_path / "DONE").read_text() == f"{ROOT / 'out' / 'step-9'}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DEFER", "DONE", "FAILED", "PROGRESS"]  # no temp left


@pytest.mark.parametrize(("args", "says"), [
    (("progress", "140"), "between 0 and 100"),
    (("progress", "-1"), "between 0 and 100"),
    (("progress", "nan"), "finite"),
    (("progress", "forty"), "invalid float"),
    (("progress", "40", "--eta", "-5"), "negative"),
    (("defer", "1.5"), "invalid int"),
    (("defer", "-3"), "whole number"),
    (("defer", str(2**31)), "whole number"),
    (("failed", "  "), "message"),
    (("done", "--location", ""), "location"),
    (("explode",), "invalid choice"),
    ((), "required"),
])
def test_bad_arguments_exit_2_with_a_message_and_write_nothing(tmp_path, args, says):
    result = _cli(*args, ckpt=tmp_path)
    assert result.returncode == 2
    assert says in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_a_checkpoint_directory_it_exits_2_and_says_which_variable(tmp_path):
    result = _cli("progress", "40")
    assert result.returncode == 2 and "LATTICE_CHECKPOINT_DIR is not set" in result.stderr
    result = _cli("defer", "60", ckpt=tmp_path / "missing")
    assert result.returncode == 2 and "not a directory" in result.stderr


def test_the_functions_read_the_directory_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTICE_CHECKPOINT_DIR", str(tmp_path))
    checkpoint.progress(40, eta_s=90)
    checkpoint.defer(30)
    checkpoint.done()
    assert parse_progress((tmp_path / "PROGRESS").read_text()) == (40, 90)
    assert parse_defer((tmp_path / "DEFER").read_text()) == 30
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.defer(True)  # type: ignore[arg-type]
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.progress(101)
    monkeypatch.delenv("LATTICE_CHECKPOINT_DIR")
    with pytest.raises(checkpoint.CheckpointError, match="LATTICE_CHECKPOINT_DIR"):
        checkpoint.progress(50)


def test_it_imports_no_django():
    """Applications run it on compute nodes, where Lattice's server dependencies are not installed."""
    code = ("import sys, nodes.checkpoint; "
            "sys.exit(1 if [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')] else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=30).returncode == 0


def test_a_reader_never_sees_a_partly_written_file(tmp_path):
    """The agent polls while the application writes: every read is a whole old or new file."""
    target = tmp_path / "PROGRESS"
    write_atomic(tmp_path, "PROGRESS", "0 " + "9" * 20000 + "\n")
    seen: set[int] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(len(target.read_text()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(300):
            write_atomic(tmp_path, "PROGRESS", f"{i % 100} " + "9" * 20000 + "\n")
    finally:
        stop.set()
        reader.join()
    assert seen <= {20003, 20004}  # "N 999...\n" with N of one or two digits, nothing shorter
    assert [p.name for p in tmp_path.iterdir()] == ["PROGRESS"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    write_atomic(tmp_path, "DEFER", "60\n")

    def broken(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path, "DEFER", "120\n")
    assert (tmp_path / "DEFER").read_text() == "60\n"
    assert [p.name for p in tmp_path.iterdir()] == ["DEFER"]
