"""A statement prepared before a migration changed its result type: recovered, not failing for good
(lattice_site/prepared.py). The migration is a second connection altering a column's type, as a
deploy's migrate would while the servers keep running."""

from __future__ import annotations

import psycopg
import pytest
from django.db import NotSupportedError, connection, transaction

from scheduling.passes import bulk

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def migrated_table():
    """A table read (and so prepared) on Django's connection; calling the fixture's value migrates
    its column from integer to text on another connection. Dropped at the end."""
    params = connection.get_connection_params()
    other = psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "host", "port",
                                                                           "password")}, autocommit=True)
    other.execute("CREATE TABLE lattice_prepared_probe (v integer)")
    other.execute("INSERT INTO lattice_prepared_probe VALUES (7)")

    def migrate() -> None:
        other.execute("ALTER TABLE lattice_prepared_probe ALTER COLUMN v TYPE text")

    yield migrate
    connection.close()
    other.execute("DROP TABLE lattice_prepared_probe")
    other.close()


def _read() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT v FROM lattice_prepared_probe WHERE v IS NOT NULL")
        return cursor.fetchall()


def _prepared_here() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                       ["%lattice_prepared_probe%"])
        return cursor.fetchone()[0]


def test_a_read_prepared_before_a_migration_is_answered_after_it(migrated_table):
    assert _read() == [(7,)] and _read() == [(7,)]
    assert _prepared_here() == 1  # the second run prepared it
    migrated_table()
    assert _read() == [("7",)]
    assert _read() == [("7",)]  # and again, prepared anew


def test_in_a_transaction_the_error_stands_and_the_next_transaction_succeeds(migrated_table):
    _read(), _read()
    migrated_table()
    with pytest.raises(NotSupportedError), transaction.atomic():
        _read()
    with transaction.atomic():
        assert _read() == [("7",)]


def test_the_scheduler_bulk_statements_recover_too(migrated_table):
    def bulk_read() -> list[tuple]:
        return bulk.execute("SELECT v FROM lattice_prepared_probe WHERE v IS NOT NULL", [])

    assert bulk_read() == [(7,)] and bulk_read() == [(7,)]
    migrated_table()
    assert bulk_read() == [("7",)]
