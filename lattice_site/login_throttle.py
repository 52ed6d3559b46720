"""Login throttling (django-axes): repeated failures for one username from one address lock that
pair out for a cool-off (see ``AXES_*`` in the settings). API tokens never pass through here."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend


class LoginThrottle(AxesStandaloneBackend):
    """Axes' check before the password backend. A call without a request (a management command
    checking a password) has no address to throttle, so it is passed on instead of refused."""

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> Any:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
