"""A confirmation step for actions that stop work or change a whole group or node (cancel,
force-preempt, pause, drain): a page asks before the action is taken. Forms carry
``data-confirm``, so with JavaScript the browser asks (static/js/confirm.js) and sends
``confirmed=1``; without it the form arrives unconfirmed and this page asks, carrying the form's
fields on. An action refused (a reason missing, work that changed state since the page was
drawn) is answered by ``refusal``: the site's page saying why, with a way back."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def confirmation(request: HttpRequest, question: str, back: str) -> HttpResponse | None:
    """None when the POST is confirmed; else the page that asks ``question`` (``back``: where
    "no" leads)."""
    if request.POST.get("confirmed") == "1":
        return None
    fields = [(name, value) for name, values in request.POST.lists() for value in values
              if name not in ("csrfmiddlewaretoken", "confirmed")]
    return render(request, "confirm.html", {"question": question, "fields": fields, "back": back,
                                            "action": request.get_full_path()})


def refusal(request: HttpRequest, message: str, back: str, status: int) -> HttpResponse:
    """The page saying why the action was not taken (``back``: the page it was asked from)."""
    return render(request, "refused.html", {"message": message, "back": back}, status=status)
