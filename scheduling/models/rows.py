"""Rows read by statements written out once, made into model instances as the ORM makes them.

The ORM compiles a query's text anew each time it runs; on the paths every request takes (API
tokens, submissions) that cost more CPU than the database spent answering. Statements built
once from the models' metadata read each model's columns by name (``select_list``), and
``load`` turns them into instances the way the ORM does: the backend's and the fields'
converters (JSON decoded, SQLite's dates parsed), then ``Model.from_db``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)
Converter = Callable[[Any, Any, Any], Any]


def quote(name: str) -> str:
    return connection.ops.quote_name(name)


def table(model: type[models.Model]) -> str:
    return quote(model._meta.db_table)


def select_list(model: type[models.Model], alias: str) -> str:
    return ", ".join(f"{alias}.{quote(f.column)}" for f in model._meta.concrete_fields)


@functools.cache
def _converters(model: type[models.Model], vendor: str) -> tuple[tuple[str, ...], tuple[tuple[Converter, ...], ...]]:
    """The attribute names of the model's columns and, for each, the converters the ORM applies to
    a value read from this database (JSON decoded, SQLite's dates parsed...)."""
    names, out = [], []
    for field in model._meta.concrete_fields:
        col = field.get_col(model._meta.db_table)
        names.append(field.attname)
        out.append(tuple(connection.ops.get_db_converters(col) + field.get_db_converters(connection)))
    return tuple(names), tuple(out)


def width(model: type[models.Model]) -> int:
    return len(model._meta.concrete_fields)


def load(model: type[M], values: Sequence[Any]) -> M:
    """A model instance from its columns as ``select_list`` reads them, as the ORM builds it."""
    names, converters = _converters(model, connection.vendor)
    row = list(values)
    for i, funcs in enumerate(converters):
        for func in funcs:
            row[i] = func(row[i], None, connection)
    return model.from_db(connection.alias, list(names), row)


def fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
