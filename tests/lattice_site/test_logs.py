"""Log lines: time, level, logger and request id as text, or JSON lines; a request's id reaches
the records it causes, the response, and the tasks it sends."""

from __future__ import annotations

import json
import logging
import re
from types import SimpleNamespace

import pytest
from celery.signals import before_task_publish, task_postrun, task_prerun

from lattice_site.logs import REQUEST_ID, RequestIdFilter
from tests.lattice_site.test_settings import _manage

EMIT = "import logging; logging.getLogger('lattice.test').warning('marker %s', 42)"


def test_a_text_line_has_time_level_logger_and_request_id():
    done = _manage("shell", "-c", EMIT, DJANGO_SETTINGS_MODULE="lattice_site.settings.dev")
    assert done.returncode == 0, done.stderr
    line = [ln for ln in done.stderr.splitlines() if "marker" in ln]
    assert len(line) == 1, done.stderr
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 WARNING lattice\.test \[-\] marker 42",
                        line[0]), line[0]


def test_log_format_json_writes_one_object_a_line():
    done = _manage("shell", "-c", EMIT, DJANGO_SETTINGS_MODULE="lattice_site.settings.dev", LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(ln) for ln in done.stderr.splitlines() if "marker" in ln]
    assert len(records) == 1, done.stderr
    record = records[0]
    assert {k: record[k] for k in ("level", "logger", "message", "request_id")} == {
        "level": "WARNING", "logger": "lattice.test", "message": "marker 42", "request_id": "-"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", record["time"])


def test_a_bad_log_format_stops_start_up_naming_it():
    done = _manage("check", LOG_FORMAT="xml")
    assert done.returncode != 0
    assert "LOG_FORMAT='xml' must be text or json" in done.stderr


@pytest.fixture
def records():
    """What the console handler would write: records after the request-id filter."""
    kept: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.addFilter(RequestIdFilter())
    handler.emit = kept.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    yield kept
    logging.getLogger().removeHandler(handler)


@pytest.mark.django_db
def test_a_safe_request_id_is_kept_in_the_logs_and_the_response(client, records):
    response = client.get("/no/such/page/", HTTP_X_REQUEST_ID="lb-7f3a.42")
    assert response.status_code == 404
    assert response["X-Request-ID"] == "lb-7f3a.42"
    not_found = [r for r in records if r.name == "django.request"]
    assert not_found and all(r.request_id == "lb-7f3a.42" for r in not_found)
    assert REQUEST_ID.get() == "-"  # the request is over


@pytest.mark.django_db
def test_an_unsafe_request_id_is_replaced(client, records):
    response = client.get("/no/such/page/", HTTP_X_REQUEST_ID="x\r\nSet-Cookie: a=b")
    generated = response["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    assert [r.request_id for r in records if r.name == "django.request"] == [generated]
    assert client.get("/no/such/page/")["X-Request-ID"] != generated  # one per request


def test_a_task_carries_the_request_id_to_the_worker_that_runs_it():
    headers: dict = {}
    token = REQUEST_ID.set("req-1")
    try:
        before_task_publish.send(sender="scheduling.sweep", headers=headers, body=None)
    finally:
        REQUEST_ID.reset(token)
    assert headers == {"lattice_request_id": "req-1"}
    # In the worker: the task's request carries the message's headers as attributes.
    task = type("Task", (), {"request": SimpleNamespace(**headers)})()
    task_prerun.send(sender=task, task_id="t1", task=task)
    assert REQUEST_ID.get() == "req-1"
    task_postrun.send(sender=task, task_id="t1", task=task)
    assert REQUEST_ID.get() == "-"
