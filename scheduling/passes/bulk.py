"""Many rows in one statement whose text does not depend on how many (PostgreSQL).

Django's bulk_create builds its INSERT anew for every batch, with a model instance
per row; Django's PostgreSQL cursor renders every parameter into the statement on
the client, and psycopg quotes a text array element by element in Python (100 KB of
JSON documents: 16 ms). A scheduler pass writing its preemptions spent more on this
than the database spent on the rows. Here each column goes as one array in binary
(nothing escaped), the statement's text is the same for every batch (the driver
converts it once), and rows are plain values. The statements run on
the same connection and in the same transaction as the ORM's. Elsewhere (SQLite)
the ORM does it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connection, models
from django.utils import timezone

from lattice_site import prepared

Row = Sequence[Any]


def on_postgresql() -> bool:
    return connection.vendor == "postgresql"


def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run ``sql`` (``%b`` placeholders: binary parameters) with server-side binding on Django's
    connection, in its current transaction; returns the rows, if any."""
    connection.ensure_connection()

    def run() -> list[tuple[Any, ...]]:
        # Errors come out as Django's (IntegrityError...), and a broken connection is noticed as
        # the ORM's own statements would make it noticed.
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cur:
            cur.execute(sql, params)  # type: ignore[call-overload]  # (a composed string at run time)
            return cur.fetchall() if cur.description is not None else []

    return prepared.retrying(connection, run)  # as the ORM's statements (lattice_site/prepared.py)


def array_type(field: models.Field) -> str:
    """The array type a column's values go as: JSON as text (``stored`` casts it back)."""
    return "text" if isinstance(field, models.JSONField) else str(field.db_type(connection))


def stored(field: models.Field, expr: str) -> str:
    """``expr``, a value of ``array_type(field)``, as the column stores it."""
    return f"{expr}::jsonb" if isinstance(field, models.JSONField) else expr


# Fields and the Python types of values the database takes as they are (None aside).
_AS_IS: tuple[tuple[tuple[type[models.Field], ...], set[type]], ...] = (
    ((models.CharField, models.TextField), {str}),
    ((models.IntegerField, models.ForeignKey), {int}),
    ((models.FloatField,), {float, int}),
    ((models.BooleanField,), {bool}),
)


def column(field: models.Field, values: Sequence[Any]) -> list[Any]:
    """One column's values as the database stores them."""
    if isinstance(field, models.JSONField):
        return [None if v is None else json.dumps(v, cls=field.encoder) for v in values]
    for kinds, types in _AS_IS:
        if isinstance(field, kinds):
            if all(v is None or type(v) in types for v in values):
                return list(values)  # what get_db_prep_save would give, without a call per value
            break
    return [field.get_db_prep_save(v, connection) for v in values]


def insert_rows(model: type[models.Model], names: Sequence[str], rows: Sequence[Row], *,
                returning: bool = False) -> list[int]:
    """Insert ``rows`` (values in the order of ``names``, attribute names such as
    ``allocation_id``) as bulk_create would: other fields take their defaults, ``auto_now`` and
    ``auto_now_add`` ones the current time. Returns the new ids in order if ``returning``."""
    if not rows:
        return []
    opts = model._meta
    fields = [opts.get_field(name) for name in names]
    if not on_postgresql():
        objs = model.objects.bulk_create([model(**dict(zip(names, row, strict=True))) for row in rows])
        return [int(obj.pk) for obj in objs] if returning else []
    now = timezone.now()
    rest = [f for f in opts.concrete_fields if not f.primary_key and f not in fields]
    filled = [now if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) else f.get_default()
              for f in rest]
    columns = [column(f, [row[i] for row in rows]) for i, f in enumerate(fields)]
    columns += [column(f, [value] * len(rows)) for f, value in zip(rest, filled, strict=True)]
    every = fields + rest
    quote = connection.ops.quote_name
    selected = ", ".join(stored(f, f"c{i}") for i, f in enumerate(every))
    sql = (f"INSERT INTO {quote(opts.db_table)} ({', '.join(quote(f.column) for f in every)}) "
           f"SELECT {selected} FROM unnest({', '.join(f'%b::{array_type(f)}[]' for f in every)}) "
           f"AS v({', '.join(f'c{i}' for i in range(len(every)))})")
    if returning:
        sql += f" RETURNING {quote(opts.pk.column)}"
    out = execute(sql, columns)
    return [int(pk) for (pk,) in out] if returning else []
