"""Input fields of the submission path made cheaper than DRF's generic ones, with the same answers.

DRF gives every serializer instance its own fields by deep-copying the declared ones, which
builds each field anew (its arguments copied, ``__init__`` run, its validators made): for the
29 fields of a submission that was a sixth of its CPU in the server. ``fresh_fields`` copies a
plain field flat instead, from an unbound copy made once per process, and a list or dict of
plain fields with a flat copy of its child; serializers and lists of them are deep-copied as DRF
does. ``GroupByName`` finds a resource group by a statement written once instead of a query
compiled for every request. Also what every input serializer mixes in: ``RefuseUnknown``.
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from django.utils.encoding import smart_str
from rest_framework import serializers

from scheduling.admission_sql import group_named
from scheduling.ids import MAX_ID, row_id
from scheduling.models import ResourceGroup


class RowById(serializers.PrimaryKeyRelatedField):
    """A row by its id: a JSON integer (not a boolean) or its ASCII digits. DRF's own field reads
    a float as the id it rounds down to (``8.9`` named row 8) and one past any integer (``1e400``)
    was an OverflowError, a 500."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and (pk := row_id(data)) is not None:
            data = pk
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("incorrect_type", data_type=type(data).__name__)
        if not 0 < data <= MAX_ID:
            self.fail("does_not_exist", pk_value=data)
        return super().to_internal_value(data)


class GroupByName(serializers.SlugRelatedField):
    """A resource group by its name, read by a statement written once (``admission_sql``); the
    same answers as DRF's lookup through the ORM, the same 400s."""

    def to_internal_value(self, data: Any) -> ResourceGroup:
        try:
            group = group_named(data)
        except (TypeError, ValueError):
            self.fail("invalid")
        if group is None:
            self.fail("does_not_exist", slug_name=self.slug_field, value=smart_str(data))
        return group


Copier = Callable[[serializers.Field], serializers.Field]
_UNBOUND: dict[type, tuple[tuple[str, serializers.Field, Copier], ...]] = {}


def _unbound_fields(cls: type[serializers.Serializer]) -> tuple[tuple[str, serializers.Field, Copier], ...]:
    """The serializer class's declared fields copied once (never bound to a serializer), their
    validators built, each with the way a request's copy of it is made (``_copier``)."""
    found = _UNBOUND.get(cls)
    if found is None:
        fields = copy.deepcopy(cls._declared_fields)  # type: ignore[attr-defined]
        for field in fields.values():
            field.validators  # noqa: B018  (built once here, shared by the flat copies)
        found = _UNBOUND[cls] = tuple((name, field, _copier(field)) for name, field in fields.items())
    return found


def _plain(field: serializers.Field) -> bool:
    return not isinstance(field, serializers.BaseSerializer) and not hasattr(field, "child") \
        and type(field).__deepcopy__ is serializers.Field.__deepcopy__


def _flat(field: serializers.Field) -> serializers.Field:
    """A copy of an unbound plain field for one serializer to bind: its own attributes (bind sets
    the name, parent, label and source on the copy), sharing with the original only what no
    request changes (arguments, validators, messages, choices)."""
    new = object.__new__(type(field))
    new.__dict__.update(field.__dict__)
    return new


def _of_plain(field: serializers.Field) -> bool:
    """A list or dict of plain fields (``command``, ``env``, ``per_node``)."""
    return isinstance(field, (serializers.ListField, serializers.DictField)) and _plain(field.child) \
        and type(field).__deepcopy__ is serializers.Field.__deepcopy__


def _flat_of_plain(field: serializers.Field) -> serializers.Field:
    """A flat copy of a list or dict field with a flat copy of its child, the child's parent the
    copy (the child was bound once, in the unbound original, to the same name and source)."""
    new = _flat(field)
    new.child = _flat(field.child)  # type: ignore[attr-defined]
    new.child.parent = new  # type: ignore[attr-defined]
    return new


def _of_serializers(field: serializers.Field) -> bool:
    """A list of a serializer (``depends_on``)."""
    return isinstance(field, serializers.ListField) and isinstance(field.child, serializers.Serializer) \
        and type(field).__deepcopy__ is serializers.Field.__deepcopy__


def _flat_of_serializers(field: serializers.Field) -> serializers.Field:
    """A flat copy of a list field with a child serializer of its own, deep-copied as DRF copies
    it (a serializer keeps its fields, built at first use) and bound to the copy as ListField's
    ``__init__`` binds it: rebuilding the list field too, its validators included, cost the most."""
    new = _flat(field)
    new.child = copy.deepcopy(field.child)  # type: ignore[attr-defined]
    new.child.bind(field_name="", parent=new)  # type: ignore[attr-defined]
    return new


def _copier(field: serializers.Field) -> Copier:
    if _plain(field):
        return _flat
    if _of_plain(field):
        return _flat_of_plain
    return _flat_of_serializers if _of_serializers(field) else copy.deepcopy


def fresh_fields(cls: type[serializers.Serializer]) -> dict[str, serializers.Field]:
    """What DRF's ``Serializer.get_fields`` returns (a field of its own for each declared one, none
    bound yet), built as above."""
    return {name: copier(field) for name, field, copier in _unbound_fields(cls)}


def env_names(value: dict[str, str]) -> None:
    """Every name of an ``env`` one a process can be given: not empty, no ``=`` (exec's separator
    of name and value: the agent could not start the work, which then stayed running for ever)."""
    bad = sorted(name for name in value if not name or "=" in name)
    if bad:
        raise serializers.ValidationError(
            f"not a variable name (empty, or with '='): {', '.join(repr(name) for name in bad)}")


class EnvMap(serializers.DictField):
    """A submission's ``env``: names a process can be given (``env_names``), values up to 4 KiB."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=4096, allow_blank=True), default=dict,
                         validators=[env_names], **kwargs)


# Control and format characters, and the line and paragraph separators: what may break a line or
# act on a terminal. Spaces other than ASCII's (a no-break space, CJK's ideographic space) are text.
NOT_ON_ONE_LINE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class PrintableText(serializers.CharField):
    """Text shown on one line wherever it appears (a job's name in lists, the command line, the
    live feed): no control or format characters (line breaks, tabs, terminal escapes)."""

    def to_internal_value(self, data: Any) -> str:
        value: str = super().to_internal_value(data)
        if not value.isprintable() and any(unicodedata.category(c) in NOT_ON_ONE_LINE for c in value):
            raise serializers.ValidationError("must be printable text on one line: no control or format characters "
                                              "(line breaks, tabs, escapes)")
        return value


class RefuseUnknown:
    """Mix into a serializer (before the DRF base) that takes input: a field it does not have is a
    400 naming that field, not silently dropped (``{"preemtion_class": 9}`` was accepted as class 0),
    and so is a field it only shows (``{"tenant": "other"}`` on a quota was answered 200, unchanged).
    ``also_known`` names fields read elsewhere from the same body (an audited edit's ``reason``)."""

    also_known: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            known = set(fields) | set(self.also_known)
            errors = {str(name): ["unknown field"] for name in data if name not in known}
            errors.update({str(name): ["read-only: not changed here"] for name in data
                           if name in fields and fields[name].read_only})
            if errors:
                raise serializers.ValidationError(dict(sorted(errors.items())))
        return super().to_internal_value(data)  # type: ignore[misc]
