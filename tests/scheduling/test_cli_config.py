"""The command line's own handling of its config, flags and job files: no server is needed, since
each of these must be settled (or refused with exit 2) before anything is sent."""

from __future__ import annotations

import io
import json

import pytest

from scheduling import cli_config
from scheduling.cli import main, parser

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a test reaching the network fails with exit 1


@pytest.mark.xfail(strict=True, reason="login saves a relative --token-file as given, so every later command "
                                       "run from another directory cannot read it")
def test_login_saves_the_token_file_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTICE_CONFIG", str(tmp_path / "cfg" / "config.json"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").write_text("lat_secret\n")
    path = cli_config.save_login(NOWHERE, None, "tok")
    saved = json.loads(path.read_text())["token_file"]
    assert saved == str(tmp_path / "tok")


@pytest.mark.xfail(strict=True, reason="the README and the module's docstring give `login [--token-file PATH]`, "
                                       "but only the top-level option exists: argparse refuses it after `login`")
def test_login_takes_the_token_file_after_the_command_as_documented(tmp_path):
    args = parser().parse_args(["login", "--token-file", str(tmp_path / "tok")])
    assert args.token_file == str(tmp_path / "tok")


@pytest.mark.xfail(strict=True, reason="job_document merges --gpus into a per_node that is not an object: "
                                       "TypeError and a traceback instead of exit 2 naming the file")
def test_a_job_file_whose_per_node_is_not_an_object_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    job = tmp_path / "job.json"
    job.write_text('{"resource_group": "rg-main", "per_node": "x"}')
    code = main(["--url", NOWHERE, "submit", "--file", str(job), "--gpus", "1", "--", "true"], out=io.StringIO())
    assert code == 2
    assert "per_node" in capsys.readouterr().err


@pytest.mark.xfail(strict=True, reason="cli_config.token catches OSError only: a token file that is not UTF-8 "
                                       "(or a token with a newline inside) ends in a traceback, not exit 2")
@pytest.mark.parametrize("content", [b"\xff\xfe", b"lat_one\nlat_two\n"])
def test_an_unusable_token_file_is_exit_2(tmp_path, capsys, content):
    bad = tmp_path / "token"
    bad.write_bytes(content)
    assert main(["--url", NOWHERE, "--token-file", str(bad), "list"], out=io.StringIO()) == 2
    assert "token" in capsys.readouterr().err
