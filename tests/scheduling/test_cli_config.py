"""The command line's own handling of its config, flags and job files: no server is needed, since
each of these must be settled (or refused with exit 2) before anything is sent."""

from __future__ import annotations

import io
import json

import pytest

from scheduling import cli_config
from scheduling.cli import main, parser

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a test reaching the network fails with exit 1


def test_login_saves_the_token_file_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTICE_CONFIG", str(tmp_path / "cfg" / "config.json"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").write_text("lat_secret\n")
    path = cli_config.save_login(NOWHERE, None, "tok")
    saved = json.loads(path.read_text())["token_file"]
    assert saved == str(tmp_path / "tok")


def test_login_takes_the_token_file_after_the_command_as_documented(tmp_path):
    args = parser().parse_args(["login", "--token-file", str(tmp_path / "tok")])
    assert args.token_file == str(tmp_path / "tok")


def test_a_job_file_whose_per_node_is_not_an_object_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    job = tmp_path / "job.json"
    job.write_text('{"resource_group": "rg-main", "per_node": "x"}')
    code = main(["--url", NOWHERE, "submit", "--file", str(job), "--gpus", "1", "--", "true"], out=io.StringIO())
    assert code == 2
    assert "per_node" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"\xff\xfe", b"lat_one\nlat_two\n", b"lat one"])
def test_an_unusable_token_file_is_exit_2(tmp_path, capsys, content):
    bad = tmp_path / "token"
    bad.write_bytes(content)
    assert main(["--url", NOWHERE, "--token-file", str(bad), "list"], out=io.StringIO()) == 2
    assert "token" in capsys.readouterr().err


def test_a_token_in_the_environment_with_a_newline_is_exit_2(capsys, monkeypatch):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_a\nb")
    assert main(["--url", NOWHERE, "list"], out=io.StringIO()) == 2
    assert "LATTICE_TOKEN" in capsys.readouterr().err


def test_a_token_file_given_before_login_is_kept(tmp_path):
    args = parser().parse_args(["--token-file", str(tmp_path / "tok"), "login"])
    assert args.token_file == str(tmp_path / "tok")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_walltime_json_cannot_carry_is_exit_2(value, capsys, monkeypatch):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    code = main(["--url", NOWHERE, "submit", "--group", "rg-main", "--gpus", "1", "--walltime", value, "--", "true"],
                out=io.StringIO())
    assert code == 2
    assert "--walltime" in capsys.readouterr().err


def test_a_job_file_with_nan_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    job = tmp_path / "job.json"
    job.write_text('{"resource_group": "rg-main", "per_node": {"gpu": 1}, "walltime_minutes": NaN}')
    assert main(["--url", NOWHERE, "submit", "--file", str(job), "--", "true"], out=io.StringIO()) == 2
    assert "NaN" in capsys.readouterr().err


def test_queue_columns_stay_in_line_whatever_the_names():
    from scheduling.cli_format import queue_table

    rows = [{"id": 7, "name": "physics-critical-3326-with-a-longer-tail", "resource_group": "a-very-long-group-name",
             "state": "pending", "preemption_class": 5, "priority": 10, "nodes": 1, "per_node": {"gpu": 8},
             "queue": {"position": 1, "ahead": 0, "reason": {"code": "RESOURCES"}}},
            {"id": 12345, "name": "", "resource_group": "rg", "state": "running", "preemption_class": 3,
             "priority": 5, "nodes": 2, "per_node": {"gpu": 1}, "queue": None}]
    lines = queue_table(["id", "name", "group", "state", "class", "gpus", "pos", "reason"], rows)

    def starts(line: str) -> list[int]:
        return [i for i, ch in enumerate(line) if ch != " " and (i == 0 or line[i - 1] == " ")]

    assert [starts(line) for line in lines[1:]] == [starts(lines[0])] * 2
    assert lines[1].split()[1] == "physics-critical-33…"


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_a_job_file_with_a_number_past_a_float_is_exit_2(tmp_path, capsys, monkeypatch, number):
    """Python reads 1e400 as inf, which went out as Infinity: the server refused the body (exit 1)."""
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    job = tmp_path / "job.json"
    job.write_text('{"resource_group": "rg-main", "per_node": {"gpu": 1}, "walltime_minutes": ' + number + "}")
    assert main(["--url", NOWHERE, "submit", "--file", str(job), "--", "true"], out=io.StringIO()) == 2
    assert number in capsys.readouterr().err


@pytest.mark.parametrize("url", ["http://[::1", "http://local host", "http://", "http://127.0.0.1:99999"])
def test_a_server_url_that_cannot_be_used_is_exit_2(url, capsys, monkeypatch):
    """Such a URL raised from deep in urllib: a traceback and exit 1."""
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    assert main(["--url", url, "list"], out=io.StringIO()) == 2
    assert "URL" in capsys.readouterr().err


@pytest.mark.parametrize("config", [{"url": 123}, {"url": NOWHERE, "token_file": 5},
                                    {"url": NOWHERE, "token_file": ["tok"]}])
def test_a_config_whose_url_or_token_file_is_not_text_is_exit_2(tmp_path, capsys, monkeypatch, config):
    monkeypatch.delenv("LATTICE_TOKEN", raising=False)
    monkeypatch.setenv("LATTICE_CONFIG", str(tmp_path / "config.json"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["list"], out=io.StringIO()) == 2
    assert "config" in capsys.readouterr().err


def test_a_config_login_cannot_write_is_exit_2(tmp_path, capsys, monkeypatch):
    """LATTICE_CONFIG naming a directory: login checked the token, then failed with a traceback."""
    (tmp_path / "tok").write_text("lat_secret\n")
    monkeypatch.setenv("LATTICE_CONFIG", str(tmp_path))
    monkeypatch.setattr("scheduling.cli.Client.call", lambda *args, **kwargs: {"results": []})
    assert main(["--url", NOWHERE, "login", "--token-file", str(tmp_path / "tok")], out=io.StringIO()) == 2
    assert "cannot write the config file" in capsys.readouterr().err


def _serving(body: bytes, content_type: str):
    """A web server that answers every path with ``body``."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (the standard library's name)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def not_lattice():
    """Another site, a login portal: an HTML page for every path."""
    yield from _serving(b"<html>welcome</html>", "text/html")


@pytest.fixture
def other_json():
    """Another JSON service: an object of another shape for every path."""
    yield from _serving(b'{"status": "ok", "items": 3}', "application/json")


def test_a_server_that_does_not_answer_json_is_exit_1_saying_so(not_lattice, capsys, monkeypatch):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    assert main(["--url", not_lattice, "show", "1"], out=io.StringIO()) == 1
    assert "not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["show", "1"], ["list"], ["explain", "1"]])
def test_json_of_another_shape_is_exit_1_saying_so_not_a_traceback(other_json, capsys, monkeypatch, argv):
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    assert main(["--url", other_json, *argv], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith("lattice: the server's answer is not what this client reads")
    assert other_json in err


@pytest.mark.parametrize("text", ['{"resource_group": "rg-main", "nodes": 1, "nodes": 64, "per_node": {"gpu": 1}}',
                                  '{"resource_group": "rg-main", "per_node": {"gpu": 1, "gpu": 8}}'])
def test_a_job_file_giving_a_key_twice_is_exit_2_naming_it(tmp_path, capsys, monkeypatch, text):
    """The CLI sends the file decoded and encoded again, so the API never saw the repeat: the job
    would have asked for whatever the key's last copy said, without a word."""
    monkeypatch.setenv("LATTICE_TOKEN", "lat_" + "x" * 40)
    job = tmp_path / "job.json"
    job.write_text(text)
    assert main(["--url", NOWHERE, "submit", "--file", str(job), "--", "true"], out=io.StringIO()) == 2
    assert "is given more than once" in capsys.readouterr().err
