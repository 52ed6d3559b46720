"""Prepared statements that a migration made stale, recovered instead of failing for good.

With ``DB_PREPARE`` a connection prepares each statement the second time it runs it.
When a migration then changes the type of a column such a statement returns,
PostgreSQL refuses to run it again ("cached plan must not change result type"),
and the driver keeps the statement, so every later run on that connection fails
the same way, for as long as the (pooled) connection lives.

Outside a transaction the statement failed alone: the connection's prepared
statements are dropped (``DEALLOCATE ALL``, which also empties the driver's
cache) and the statement runs once more, so the caller never sees the error.
Inside one, the transaction has failed and its owner rolls it back; the driver
drops every prepared statement at a rollback, so the next transaction prepares
afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import NotSupportedError

T = TypeVar("T")

STALE = "cached plan must not change result type"


def retrying(connection: Any, run: Callable[[], T]) -> T:
    """``run()`` (one statement on ``connection``), once more after dropping the connection's
    prepared statements if one of them was stale; inside a transaction, the error stands."""
    try:
        return run()
    except NotSupportedError as exc:
        if STALE not in str(exc):
            raise
        if connection.in_atomic_block:  # the rollback that follows drops the statements
            raise
        with connection.connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
    return run()


def recover(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """Django execute wrapper (see ``install``)."""
    return retrying(context["connection"], lambda: execute(sql, params, many, context))


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: PostgreSQL connections that prepare statements recover
    from the ones a migration made stale."""
    if connection.vendor != "postgresql" or connection.settings_dict["OPTIONS"].get("prepare_threshold") is None:
        return
    if recover not in connection.execute_wrappers:  # the wrapper outlives each connection it opens
        connection.execute_wrappers.append(recover)
