"""Numbers people type into forms and clients send to the API: ASCII digits only, as ids are
(``scheduling/ids.py``). Django's and DRF's integer and float fields read any Unicode decimal
digit, so "١" (Arabic-Indic one) or "１" (fullwidth) was taken as 1 and "١.٥" as 1.5; here such
text is refused as not a number. Every form and serializer that takes a number from a user uses
these; model forms get ``IntegerField`` through ``model_formfield`` (the admin through
``ADMIN_OVERRIDES``). The same two hooks give JSON boxes ``JSONFormField``: Django's reads text
nested past what ``json`` follows as a RecursionError, a 500."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import models
from rest_framework import serializers


def _non_ascii(value: Any) -> bool:
    return isinstance(value, str) and not value.isascii()


class _AsciiFormField:
    """Mixed into a Django number field: text with other than ASCII characters is not a number."""

    error_messages: dict[str, Any]

    def to_python(self, value: Any) -> Any:
        if _non_ascii(value):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)  # type: ignore[misc]


class _AsciiInput:
    """Mixed into a DRF number field: the same (a JSON number is one already)."""

    def to_internal_value(self, data: Any) -> Any:
        if _non_ascii(data):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class IntegerField(_AsciiFormField, forms.IntegerField):
    """``forms.IntegerField`` reading ASCII digits only."""


class FloatField(_AsciiFormField, forms.FloatField):
    """``forms.FloatField`` reading ASCII digits only."""


class JSONFormField(forms.JSONField):
    """``forms.JSONField`` refusing text nested past what ``json`` follows as it refuses text that
    is not JSON (``invalid``), when cleaned and when the form is shown again with its errors."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid",
                                        params={"value": "(nested too deeply)"}) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)


class IntegerInput(_AsciiInput, serializers.IntegerField):
    """``serializers.IntegerField`` reading ASCII digits only."""


class FloatInput(_AsciiInput, serializers.FloatField):
    """``serializers.FloatField`` reading ASCII digits only."""


def model_formfield(field: models.Field, **kwargs: Any) -> forms.Field | None:
    """A model form's field for ``field`` (``Meta.formfield_callback``): numbers read as above."""
    if isinstance(field, models.IntegerField) and not isinstance(field, models.AutoField):
        kwargs.setdefault("form_class", IntegerField)
    elif isinstance(field, models.FloatField):
        kwargs.setdefault("form_class", FloatField)
    elif isinstance(field, models.JSONField):
        kwargs.setdefault("form_class", JSONFormField)
    return field.formfield(**kwargs)  # type: ignore[no-any-return]


# ModelAdmin.formfield_overrides: the admin's number fields read as above (its widgets kept).
ADMIN_OVERRIDES: dict[type[models.Field], dict[str, Any]] = {
    models.IntegerField: {"form_class": IntegerField},
    models.BigIntegerField: {"form_class": IntegerField},
    models.FloatField: {"form_class": FloatField},
    models.JSONField: {"form_class": JSONFormField},
}


# A model serializer's ``serializer_field_mapping`` entries to replace: DRF's field -> the one above.
ASCII_INPUTS: dict[type[serializers.Field], type[serializers.Field]] = {
    serializers.IntegerField: IntegerInput,
    serializers.FloatField: FloatInput,
}
