from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.postgres
@pytest.mark.django_db
def test_migrations_apply_on_postgresql_and_models_match():
    assert connection.vendor == "postgresql"
    tables = set(connection.introspection.table_names())
    assert {"scheduling_allocation", "scheduling_preemptiondecision", "nodes_node"} <= tables
    # models and migrations agree: no pending changes
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db
def test_no_missing_migrations():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
