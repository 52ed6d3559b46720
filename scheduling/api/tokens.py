"""A user's own API tokens: list, issue (shown once), revoke. Nobody sees another user's."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling.actions.tokens import api_token_issue, api_token_revoke
from scheduling.api.pagination import NewestFirst
from scheduling.models import ApiToken
from scheduling.models.secrets import PREFIX_LEN, digest


class TokenOutput(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "prefix", "created_at", "revoked_at"]
        read_only_fields = fields


ISSUED = inline_serializer("IssuedToken", {
    "id": serializers.IntegerField(), "prefix": serializers.CharField(), "created_at": serializers.DateTimeField(),
    "revoked_at": serializers.DateTimeField(allow_null=True), "token": serializers.CharField(),
    "note": serializers.CharField()})


class TokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = TokenOutput
    pagination_class = NewestFirst

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user).order_by("-id")

    @extend_schema(request=None, responses={201: ISSUED})
    def create(self, request: Request) -> Response:
        """Issue a token for yourself. It takes no fields: one sent (a name, say) is a 400 rather
        than dropped, so nobody believes a token carries what it does not."""
        if request.data:
            raise serializers.ValidationError({str(name): ["unknown field"] for name in request.data}
                                              if isinstance(request.data, dict) else ["takes no body"])
        token = api_token_issue(user=request.user)
        record = self.get_queryset().get(prefix=token[:PREFIX_LEN], digest=digest(token))
        return Response({**TokenOutput(record).data, "token": token,
                         "note": "shown once: store it now; only its digest is kept"},
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: TokenOutput})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        """Revoke one of your tokens (idempotent: revoking a revoked token changes nothing)."""
        record = self.get_object()
        api_token_revoke(user=request.user, token_id=record.pk)
        record.refresh_from_db()
        return Response(TokenOutput(record).data)
