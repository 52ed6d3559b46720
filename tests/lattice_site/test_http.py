"""HTTP under the ASGI server goes through Django's WSGI handler in one thread hop (lattice_site/http.py)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator

from lattice_site.asgi import application
from lattice_site.http import environ

pytestmark = pytest.mark.django_db(transaction=True)


def _call(method: str, path: str, body: bytes = b"", headers: list | None = None) -> dict:
    comm = HttpCommunicator(application, method, path, body=body,
                            headers=[(b"host", b"127.0.0.1"), *(headers or [])])
    return async_to_sync(comm.get_response)()


def test_request_body_and_headers_reach_the_view(api_for, operator):
    from scheduling.actions.tokens import api_token_issue

    token = api_token_issue(user=operator)
    response = _call("POST", "/api/v1/simulate/", json.dumps({"policy": {"kind": "nonsense"}}).encode(),
                     [(b"authorization", f"Token {token}".encode()), (b"content-type", b"application/json")])
    assert response["status"] == 400
    assert "policy" in json.dumps(json.loads(response["body"]))


def test_unauthenticated_api_is_refused_and_health_answers():
    assert _call("GET", "/api/v1/allocations/")["status"] in (401, 403)
    health = _call("GET", "/healthz")
    assert health["status"] == 200 and json.loads(health["body"])["status"] == "ok"


def test_environ_follows_wsgi_names_and_joins_repeated_headers():
    scope = {"type": "http", "method": "GET", "path": "/lattice/jobs/é", "root_path": "/lattice",
             "query_string": b"a=1&b=2", "http_version": "1.1", "scheme": "https",
             "server": ("lattice.example", 443), "client": ("10.0.0.7", 5555),
             "headers": [(b"cookie", b"a=1"), (b"cookie", b"b=2"), (b"x-thing", b"1"), (b"x-thing", b"2"),
                         (b"content-type", b"application/json"), (b"content-length", b"2")]}
    env = environ(scope, None)
    assert env["SCRIPT_NAME"] == "/lattice"
    assert env["PATH_INFO"] == "/jobs/é".encode().decode("latin1")
    assert (env["QUERY_STRING"], env["SERVER_NAME"], env["SERVER_PORT"]) == ("a=1&b=2", "lattice.example", "443")
    assert (env["wsgi.url_scheme"], env["REMOTE_ADDR"]) == ("https", "10.0.0.7")
    assert env["HTTP_COOKIE"] == "a=1; b=2"
    assert env["HTTP_X_THING"] == "1,2"
    assert (env["CONTENT_TYPE"], env["CONTENT_LENGTH"]) == ("application/json", "2")
