"""POST /api/v1/simulate/: the decision contract as a service (operators only)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.api.parsers import JSONParser
from scheduling.engine import decide_scenario, parse_scenario
from scheduling.permissions import IsOperator


class SimulateView(APIView):
    permission_classes = [IsOperator]
    parser_classes = [JSONParser]

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT},
                   summary="Decide a scenario document (docs/decisions.md)")
    def post(self, request: Request) -> Response:
        scenario = parse_scenario(request.data)
        return Response(decide_scenario(scenario).to_dict())
