"""The command line against files and servers that are not what it expects: exit 2 and one line
for a bad file (nothing sent), exit 1 and one line for a server that answers badly, never a
traceback, never reading without end."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import threading

import pytest

from scheduling.cli import main
from tests.conftest import ROOT

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a test reaching the network fails with exit 1
TOKEN = "lat_" + "x" * 40


@pytest.fixture
def token(monkeypatch, tmp_path):
    monkeypatch.setenv("LATTICE_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.setenv("LATTICE_TOKEN", TOKEN)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lattice: ") and "Traceback" not in err, err
    return err


def test_a_job_file_nested_past_the_parser_is_exit_2(token, tmp_path, capsys):
    job = tmp_path / "job.json"
    job.write_text('{"per_node": {"gpu": 1}, "env": ' + "[" * 100_000 + "}")
    assert main(["--url", NOWHERE, "submit", "--file", str(job)], out=io.StringIO()) == 2
    assert "is not JSON: nested too deeply" in _one_line_error(capsys)


def test_a_config_nested_past_the_parser_is_exit_2(tmp_path, capsys, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text("[" * 20_000)
    monkeypatch.setenv("LATTICE_CONFIG", str(config))
    monkeypatch.delenv("LATTICE_URL", raising=False)
    assert main(["list"], out=io.StringIO()) == 2
    assert "cannot read the config file" in _one_line_error(capsys)


def test_a_job_file_past_a_mebibyte_is_exit_2_before_anything_is_sent(token, tmp_path, capsys):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"per_node": {"gpu": 1}, "command": ["true"], "name": " " * (1024 * 1024)}))
    assert main(["--url", NOWHERE, "submit", "--file", str(job)], out=io.StringIO()) == 2
    assert "is over 1024 KiB" in _one_line_error(capsys)


@pytest.mark.parametrize("argv, stdin", [
    (["submit", "--file", "/dev/zero"], None),  # a file without end
    (["login"], "/dev/zero"),                   # a token on standard input without end
])
def test_input_without_end_is_refused_not_read_forever(argv, stdin, tmp_path):
    """A real process: before, it read /dev/zero until memory ran out."""
    env = {"PATH": "/usr/bin:/bin", "LATTICE_CONFIG": str(tmp_path / "c.json"), "LATTICE_TOKEN": TOKEN}
    with open(stdin or "/dev/null", "rb") as given:
        done = subprocess.run([sys.executable, "-m", "scheduling.cli", "--url", NOWHERE, *argv], cwd=ROOT,
                              stdin=given, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_a_token_file_the_config_names_with_a_nul_is_exit_2(tmp_path, capsys, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"url": NOWHERE, "token_file": "tok\u0000en"}))
    monkeypatch.setenv("LATTICE_CONFIG", str(config))
    monkeypatch.delenv("LATTICE_TOKEN", raising=False)
    assert main(["list"], out=io.StringIO()) == 2
    assert "cannot read the token file" in _one_line_error(capsys)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/?next=/", "http://127.0.0.1:8000/#top"])
def test_a_url_with_a_query_or_fragment_is_exit_2(token, url, capsys):
    assert main(["--url", url, "list"], out=io.StringIO()) == 2
    assert "no ?query or #fragment" in _one_line_error(capsys)


def _raw_server(answer: bytes):
    """A TCP server that answers every connection with ``answer`` as it is, then closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def _http(status: str, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in (f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers))
    return head.encode() + b"\r\n" + body


@pytest.fixture(params=[
    pytest.param((b"SSH-2.0-OpenSSH_9.6\r\n", "not as HTTP does (BadStatusLine)"), id="not-http"),
    pytest.param((b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{\"results\": [",
                  "not as HTTP does (IncompleteRead)"), id="cut-short"),
    pytest.param((_http("200 OK", b"[" * 100_000), "answered, but not JSON"), id="nested-answer"),
    pytest.param((_http("502 Bad Gateway", b"<html>\n<body>\n<h1>502 Bad Gateway</h1>\n</body>\n</html>\n"),
                  "502: an HTML page, not the API's JSON"), id="proxy-page"),
    pytest.param((_http("400 Bad Request", b'{"detail": "first\\nsecond\\u001b[2J"}'), "400: first second [2J"),
                 id="detail-with-controls"),
])
def bad_answer(request):
    answer, said = request.param
    for url in _raw_server(answer):
        yield url, said


def test_a_server_answering_badly_is_exit_1_in_one_line(token, bad_answer, capsys):
    url, said = bad_answer
    assert main(["--url", url, "list"], out=io.StringIO()) == 1
    err = _one_line_error(capsys)
    assert said in err and "\x1b" not in err


def test_a_list_whose_next_page_leads_back_is_exit_1_not_a_loop(token, capsys):
    page = json.dumps({"results": [], "next": "http://lattice.example/api/v1/allocations/?cursor=same"}).encode()
    for url in _raw_server(_http("200 OK", page, "Content-Type: application/json")):
        assert main(["--url", url, "list"], out=io.StringIO()) == 1
    assert "leads back to a page already read" in _one_line_error(capsys)


def test_ctrl_c_is_exit_130_without_a_traceback(token, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("scheduling.cli.Client.call", interrupted)
    assert main(["--url", NOWHERE, "list"], out=io.StringIO()) == 130
    assert _one_line_error(capsys) == "lattice: interrupted\n"


@pytest.mark.parametrize("argv", [
    ["cancel", "١٢"],  # Arabic-Indic 12: int() reads it as job 12
    ["cancel", "１２"],  # fullwidth
    ["cancel", "1_2"],  # int() reads the underscore as a separator: 12
    ["show", "1" * 5000],
    ["submit", "--gpus", "١", "--", "run"],
    ["submit", "--gpus", "1", "--nodes", "1_0", "--", "run"],
    ["submit", "--gpus", "1", "--walltime", "١.٥", "--", "run"],
])
def test_numbers_on_the_command_line_are_ascii_digits(token, capsys, argv):
    """As every number the server reads (scheduling/ids.py, scheduling/ascii_numbers.py): another
    job's id or a count is never read from other digits, and nothing is sent (exit 2, not 1)."""
    assert main(["--url", NOWHERE, *argv], out=io.StringIO()) == 2
    assert "Traceback" not in capsys.readouterr().err


FORGED = "\x1b]0;owned\x07\x1b[2Jrenamed\r\n#7        running       class 9   forged"


def _job(**fields):
    return {"id": 12, "state": "pending", "preemption_class": 0, "resource_group": "rg", "vcluster": None,
            "nodes": 1, "per_node": {"gpu": 1.0}, "name": "", **fields}


@pytest.mark.parametrize("argv, answer", [
    (["list"], {"results": [_job(name=FORGED)], "next": None}),
    (["show", "12"], _job(name=FORGED, per_node={"gpu\x1b[8m": 1.0})),
    (["events", "12"], {"results": [{"created_at": "2026-11-29T00:00:00Z", "from_state": None, "to_state": "pending",
                                     "reason": FORGED}], "next": None}),
])
def test_text_from_the_server_reaches_the_terminal_with_its_controls_escaped(token, capsys, argv, answer):
    """A job's name or a reason is another user's text (an operator's listing shows every tenant's
    jobs): printed as it came, its escapes would rewrite the reader's terminal and its line breaks
    forge lines of the listing. The text output shows them escaped; --json keeps them, escaped by JSON."""
    page = json.dumps(answer).encode()
    for url in _raw_server(_http("200 OK", page, "Content-Type: application/json")):
        out = io.StringIO()
        assert main(["--url", url, *argv], out=out) == 0
        text = out.getvalue()
        assert not any(c in text for c in "\x1b\x07\r"), text
        assert text.count("\n") == 1 and "\\x1b]0;owned\\x07" in text and "\\r\\n#7" in text
        raw = io.StringIO()
        assert main(["--url", url, "--json", *argv], out=raw) == 0
    assert FORGED in raw.getvalue().encode().decode("unicode_escape")


@pytest.mark.parametrize("status", ["301 Moved Permanently", "302 Found", "303 See Other",
                                    "307 Temporary Redirect", "308 Permanent Redirect"])
def test_a_redirect_is_exit_1_naming_it_and_the_token_goes_nowhere_else(token, capsys, status):
    """The API never redirects; following one would send the token (its Authorization header) to
    whatever host the answer names, plain HTTP included."""
    heard: list[bytes] = []
    elsewhere = socket.create_server(("127.0.0.1", 0))

    def listen() -> None:
        try:
            conn, _ = elsewhere.accept()
        except OSError:
            return
        with conn:
            heard.append(conn.recv(65536))

    threading.Thread(target=listen, daemon=True).start()
    target = f"http://localhost:{elsewhere.getsockname()[1]}/api/v1/allocations/"
    try:
        for url in _raw_server(_http(status, b"", f"Location: {target}")):
            assert main(["--url", url, "list"], out=io.StringIO()) == 1
    finally:
        elsewhere.close()
    err = _one_line_error(capsys)
    assert f"redirects to {target}" in err and "--url" in err, err
    assert heard == [], heard


@pytest.mark.parametrize("given", ["", ",", "pending,", " , running"])
def test_an_empty_state_is_exit_2_before_any_request(given, capsys):
    assert main(["--url", NOWHERE, "queue", "--state", given], out=io.StringIO()) == 2  # argparse's refusal
    assert "is not a comma-separated list of states" in capsys.readouterr().err
