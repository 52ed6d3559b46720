"""Token authentication against hashed API tokens, compared in constant time."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from scheduling.models import ApiToken
from scheduling.selectors import remember_tenant_ids


class ApiTokenAuthentication(BaseAuthentication):
    keywords = (b"token", b"bearer")

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in self.keywords:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Authorization header must be 'Token <key>'.")
        found = ApiToken.user_for(parts[1].decode(errors="replace"))
        if found is None:
            raise AuthenticationFailed("Invalid or revoked token.")
        user, record, tenants = found
        remember_tenant_ids(user, tenants)
        return user, record

    def authenticate_header(self, request: Any) -> str:
        return "Token"


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
        target_class = "scheduling.api.auth.ApiTokenAuthentication"
        name = "tokenAuth"

        def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
            return {"type": "apiKey", "in": "header", "name": "Authorization",
                    "description": "'Token <key>' (issue one with manage.py api_token USER)"}
except ImportError:  # the schema generator is optional at run time
    pass
