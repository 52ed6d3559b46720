"""Every list in the admin, Lattice's own and those of the apps it installs (users, groups, login
attempts), answers a filter out of range as a bad filter, not a 500.

An integer past 64 bits in an ``__in`` lookup (``?id__in=99999999999999999999999``: SQLite cannot
bind it) and a date-hierarchy day past the calendar's end (``?submitted_at__year=9999&..._month=12
&..._day=31``: the day after it does not exist) raised OverflowError inside the change list. Both
now take the admin's own answer to a bad lookup, a redirect to ``?e=1``, as a malformed
``__range`` already did. So does the year 9999 (``?created_at__year=9999``: Django bounds the
year by the next one, which does not exist)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite, ModelAdmin, site
from django.contrib.admin.apps import AdminConfig
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest


class VettedChangeList(ChangeList):
    def get_filters(self, request: HttpRequest) -> Any:
        try:
            return super().get_filters(request)
        except (OverflowError, ValueError) as exc:  # ValueError: the year after 9999
            raise IncorrectLookupParameters(exc) from exc

    def get_results(self, request: HttpRequest) -> None:
        try:
            super().get_results(request)
        except OverflowError as exc:
            raise IncorrectLookupParameters(exc) from exc


class VettedLists:
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return VettedChangeList


def vet_every_list(site: AdminSite) -> None:
    """Registers each model again with its admin class under VettedLists."""
    for model, model_admin in list(site._registry.items()):
        if isinstance(model_admin, VettedLists):
            continue
        cls: type[ModelAdmin[Any]] = type(model_admin)
        site.unregister(model)
        site.register(model, type(cls.__name__, (VettedLists, cls), {"__module__": cls.__module__}))


class LatticeAdminConfig(AdminConfig):
    """django.contrib.admin, with every model's admin (found by autodiscover) vetted."""

    def ready(self) -> None:
        super().ready()
        vet_every_list(site)
