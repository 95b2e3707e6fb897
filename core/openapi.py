"""OpenAPI pieces shared by every API: the error envelope."""

from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer, inline_serializer
from rest_framework import serializers

from core.errors import ErrorCode

ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "error": inline_serializer(
            name="ErrorBody",
            fields={
                # An enum of the registry: a generated client knows every code it may meet.
                "code": serializers.ChoiceField(choices=[(code.value, code.value) for code in ErrorCode]),
                "message": serializers.CharField(),
                "details": serializers.DictField(),
            },
        )
    },
)

_DESCRIPTIONS = {
    400: "Malformed or invalid input",
    401: "Not authenticated",
    403: "Not allowed (e.g. the e-mail is not verified)",
    404: "Not found",
    409: "Conflict with the current state",
    422: "Well-formed but cannot be processed",
    413: "The body is larger than the server accepts",
    415: "The body is not JSON",
    429: "Rate limited (see Retry-After)",
    503: "A service the shop depends on is unavailable",
}

# What any endpoint that reads a JSON body may also answer.
BODY_ERRORS = (400, 413, 415)


def ERRORS(*statuses: int) -> dict:  # noqa: N802 - reads like a constant in decorators
    return {s: OpenApiResponse(ErrorSerializer, description=_DESCRIPTIONS[s]) for s in statuses}


def page_serializer(item: type[serializers.Serializer], ref_name: str) -> type[serializers.Serializer]:
    """The documented body of a PageNumberPagination answer of `item`s (one page
    object, also when it answers a `list` action)."""
    fields = {
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
        "results": item(many=True),
        "Meta": type("Meta", (), {"ref_name": ref_name}),
        "__doc__": "What PageNumberPagination answers.",
    }
    return extend_schema_serializer(many=False)(type(f"{ref_name}Serializer", (serializers.Serializer,), fields))
