"""Pages. Views are thin: they read through selectors and change through actions."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.shortcuts import render
from django.templatetags.static import static
from django.views.decorators.http import require_safe

from scheduling.models import Allocation, ResourceGroup
from scheduling.permissions import is_operator


@login_required
def home(request: HttpRequest) -> HttpResponse:
    groups = ResourceGroup.objects.all()
    mine = Allocation.objects.filter(tenant__memberships__user=request.user).count()
    return render(request, "home.html", {"groups": groups, "operator": is_operator(request.user),
                                         "my_allocations": mine})


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on pages that name no icon (the API's docs, error pages):
    sent to the project's own icon, not a 404 in every console."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))
