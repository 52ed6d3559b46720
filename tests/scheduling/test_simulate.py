"""simulate as a command and as an API: same document, same decision, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCENARIOS = sorted((ROOT / "tests" / "fixtures" / "scenarios").glob("*.json"))


def _simulate(arg: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "simulate", arg], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_simulate_command_prints_expected_decision(path: Path):
    case = json.loads(path.read_text())
    result = _simulate(str(path))
    if case["expect"].get("invalid"):
        assert result.returncode == 2
        assert result.stdout == ""
        return
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    expect = case["expect"]
    assert (out["outcome"], out["code"]) == (expect["outcome"], expect["code"])
    assert sorted(v["id"] for v in out["victims"]) == sorted(expect["victims"])
    for key in ("nodes", "trigger"):
        if key in expect:
            assert out[key] == expect[key]


def test_simulate_reads_stdin_and_names_the_bad_field():
    case = json.loads((ROOT / "tests/fixtures/scenarios/va01-class-11-invalid.json").read_text())
    result = _simulate("-", json.dumps(case["input"]))
    assert result.returncode == 2
    assert "running[0].preemption_class: must be between 0 and 10" in result.stderr


def test_simulate_bad_file_exits_2():
    assert _simulate("/nonexistent/scenario.json").returncode == 2
    assert _simulate("-", "{not json").returncode == 2


@pytest.mark.django_db
def test_simulate_api_same_decision_for_operators(client, operator):
    case = json.loads((ROOT / "tests/fixtures/scenarios/cc12-lattice-four-gangs-three-victims.json").read_text())
    client.force_login(operator)
    response = client.post("/api/v1/simulate/", case["input"], content_type="application/json")
    assert response.status_code == 200
    body = response.json()
    assert [v["id"] for v in body["victims"]] == ["a2", "a3", "a4"]
    assert body["nodes"] == case["expect"]["nodes"]


@pytest.mark.django_db
def test_simulate_api_invalid_is_400_with_field_errors(client, operator):
    case = json.loads((ROOT / "tests/fixtures/scenarios/va01-class-11-invalid.json").read_text())
    client.force_login(operator)
    response = client.post("/api/v1/simulate/", case["input"], content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"running[0].preemption_class": ["must be between 0 and 10"]}


@pytest.mark.django_db
def test_simulate_api_is_for_operators_only(client, tenant_physics, django_user_model):
    client.force_login(django_user_model.objects.get(username="alice"))
    assert client.post("/api/v1/simulate/", {}, content_type="application/json").status_code == 403
    client.logout()
    assert client.post("/api/v1/simulate/", {}, content_type="application/json").status_code == 401


@pytest.mark.parametrize(("content", "said"), [
    pytest.param(b"\xff\xfe{}", "not UTF-8", id="not-utf8"),
    pytest.param(b"[" * 100_000, "nested too deeply", id="nested"),
])
@pytest.mark.parametrize("from_stdin", [False, True], ids=["file", "stdin"])
def test_a_file_that_is_not_utf8_or_nested_past_the_parser_is_exit_2_in_one_line(tmp_path, monkeypatch, content,
                                                                                  said, from_stdin):
    import io

    from django.core.management import CommandError, call_command

    path = tmp_path / "scenario.json"
    path.write_bytes(content)
    if from_stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(content), encoding="utf-8"))
    with pytest.raises(CommandError) as raised:
        call_command("simulate", "-" if from_stdin else str(path))
    assert raised.value.returncode == 2
    assert said in str(raised.value) and "\n" not in str(raised.value)
