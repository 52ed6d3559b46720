"""Settings fail fast on a bad value; production settings pass check --deploy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROD = {"DJANGO_SETTINGS_MODULE": "lattice_site.settings.production",
        "SECRET_KEY": "k" * 20 + "Zq8#xY2!mN4@pL6$vB0^cR3&tW5*uE7(", "ALLOWED_HOSTS": "lattice.example.org"}


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    full["LATTICE_VAR_DIR"] = str(ROOT / "var" / "test-settings")
    full.update(env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=120)


def test_production_settings_pass_check_deploy():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **PROD)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_production_requires_secret_key():
    env = dict(PROD, SECRET_KEY="")
    result = _manage("check", **env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_bad_boolean_fails_fast_naming_the_variable():
    result = _manage("check", DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_bad_database_url_fails_fast():
    result = _manage("check", DATABASE_URL="nosuchdb://x")
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_postgres_connections_are_pooled_and_a_statement_timeout_can_bound_them():
    code = ("from django.conf import settings; o = settings.DATABASES['default']['OPTIONS']; "
            "print(o['pool']['max_size'], o.get('options'), settings.DATABASES['default']['CONN_MAX_AGE'])")
    env = {"DATABASE_URL": "postgres://lattice@db.example:5432/lattice", "DJANGO_SETTINGS_MODULE":
           "lattice_site.settings.dev", "DB_POOL_MAX": "7", "DB_STATEMENT_TIMEOUT_MS": "60000"}
    result = _manage("shell", "-c", code, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == ["7", "-c", "statement_timeout=60000", "0"]
    result = _manage("shell", "-c", code, **{**env, "DB_STATEMENT_TIMEOUT_MS": "soon"})
    assert result.returncode != 0 and "DB_STATEMENT_TIMEOUT_MS" in result.stderr


def test_a_nonsensical_pool_size_is_refused_at_start_up():
    code = "from django.conf import settings; print(settings.DATABASES['default']['OPTIONS']['pool'])"
    env = {"DATABASE_URL": "postgres://lattice@db.example:5432/lattice", "DJANGO_SETTINGS_MODULE":
           "lattice_site.settings.dev"}
    for bad in ("0", "-5"):
        result = _manage("shell", "-c", code, **{**env, "DB_POOL_MAX": bad})
        assert result.returncode != 0
        assert f"DB_POOL_MAX='{bad}' must be at least 1" in result.stderr
    result = _manage("shell", "-c", code, **{**env, "DB_POOL_MAX": "1"})  # the smallest pool: one connection
    assert result.returncode == 0, result.stderr
    assert "'min_size': 1, 'max_size': 1" in result.stdout


def test_postgres_statements_are_prepared_unless_turned_off_for_a_pooler():
    code = ("from django.conf import settings; o = settings.DATABASES['default']['OPTIONS']; "
            "print(o.get('server_side_binding'), o.get('prepare_threshold'))")
    env = {"DATABASE_URL": "postgres://lattice@db.example:5432/lattice", "DJANGO_SETTINGS_MODULE":
           "lattice_site.settings.dev"}
    result = _manage("shell", "-c", code, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == ["True", "1"]
    result = _manage("shell", "-c", code, **{**env, "DB_PREPARE": "false"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == ["None", "None"]


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_repeated_api_read_runs_as_a_prepared_statement():
    """The token lookup every API request makes is planned once per connection, not per request."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import ApiToken

    token = api_token_issue(user=get_user_model().objects.create_user("pat"))

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
                           ["%scheduling_apitoken%"])
            return [row[0] for row in cursor.fetchall()]

    assert prepared() == []
    for _ in range(3):
        found = ApiToken.user_for(token)
        assert found is not None and found[0].username == "pat"
    assert len(prepared()) == 1


def test_a_log_record_of_django_is_written_once_in_development():
    """Django's request lines and warnings reach one handler, not Django's and the root's both."""
    done = _manage("shell", "-c", "import logging; logging.getLogger('django.request').warning('marker-%s', 42)",
                   DJANGO_SETTINGS_MODULE="lattice_site.settings.dev", DEBUG="true")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("marker-42") == 1, done.stderr


def test_log_level_holds_for_django_records_too():
    done = _manage("shell", "-c", "import logging; logging.getLogger('django.request').info('marker-%s', 7)",
                   DJANGO_SETTINGS_MODULE="lattice_site.settings.dev", DEBUG="true", LOG_LEVEL="WARNING")
    assert done.returncode == 0, done.stderr
    assert "marker-7" not in done.stderr


def test_a_bad_log_level_fails_fast_naming_the_variable():
    result = _manage("check", LOG_LEVEL="LOUD")
    assert result.returncode != 0
    assert "LOG_LEVEL='LOUD'" in result.stderr


@pytest.mark.parametrize(("name", "value"), [("LOGIN_FAILURE_LIMIT", "0"), ("LOGIN_COOLOFF_MINUTES", "-5"),
                                             ("LOGIN_COOLOFF_MINUTES", "0"), ("LATTICE_SWEEP_SECONDS", "0"),
                                             ("LATTICE_EVALUATION_TIME_LIMIT_S", "30")])
def test_a_login_throttle_out_of_range_fails_fast_naming_the_variable(name, value):
    result = _manage("check", **{name: value})
    assert result.returncode != 0
    assert f"{name}={value!r} must be at least" in result.stderr


@pytest.mark.parametrize(("value", "words"), [("-1", "must be at least 0"), ("1001", "must be at most 1000"),
                                              ("5ms", "is not an integer")])
def test_a_heartbeat_collection_window_out_of_range_fails_fast(value, words):
    result = _manage("check", LATTICE_HEARTBEAT_COLLECT_MS=value)
    assert result.returncode != 0
    assert f"LATTICE_HEARTBEAT_COLLECT_MS={value!r} {words}" in result.stderr


def test_the_heartbeat_collection_window_comes_from_the_environment():
    code = "from nodes import heartbeats; print(heartbeats.COLLECT_S)"
    result = _manage("shell", "-c", code, LATTICE_HEARTBEAT_COLLECT_MS="20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "0.02"


def test_a_log_level_in_lower_case_is_taken():
    assert _manage("check", LOG_LEVEL="warning").returncode == 0


def test_a_refusal_is_logged_as_one_line_without_a_traceback():
    """What Django logs for a PermissionDenied (its own call): the line, not the exception's traceback."""
    code = ("from django.core.exceptions import PermissionDenied; from django.http import HttpResponseForbidden; "
            "from django.test import RequestFactory; from django.utils.log import log_response; "
            "log_response('Forbidden (Permission denied): %s', '/ops/', response=HttpResponseForbidden(), "
            "request=RequestFactory().get('/ops/'), exception=PermissionDenied('marker-403'))")
    done = _manage("shell", "-c", code, DJANGO_SETTINGS_MODULE="lattice_site.settings.dev", DEBUG="true")
    assert done.returncode == 0, done.stderr
    assert "Forbidden (Permission denied): /ops/" in done.stderr
    assert "Traceback" not in done.stderr and "marker-403" not in done.stderr


def test_the_embedded_mode_s_broker_logs_no_warning():
    """Without Redis, Celery's broker is in memory: touching it must not warn of a missing host."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                           "from lattice_site.celery import app; app.connection_for_write().info()"],
                          cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.dev", "DEBUG": "true",
                                         "LATTICE_VAR_DIR": str(ROOT / "var" / "test-settings")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "kombu" not in done.stderr and "No hostname" not in done.stderr


def test_the_tests_pass_locks_are_their_own_not_the_checkouts(settings):
    """A `make run` of the same checkout keeps its SQLite group locks under var/: a test run
    holding the same files blocked its passes (and the other way round)."""
    from scheduling.models import ResourceGroup
    from scheduling.passes.locks import group_lock

    assert settings.VAR_DIR != ROOT / "var" and not str(settings.VAR_DIR).startswith(str(ROOT / "var"))
    assert str(settings.VAR_DIR) == os.environ["LATTICE_TEST_VAR_DIR"]  # the session's processes share it
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return  # PostgreSQL's passes take advisory locks, no files
    import fcntl

    (ROOT / "var" / "locks").mkdir(parents=True, exist_ok=True)
    with open(ROOT / "var" / "locks" / "rg-1.lock", "w") as held:  # as a running `make run` holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with group_lock(ResourceGroup(pk=1, name="g")) as got:
            assert got
