"""How the API's token authentication appears in the OpenAPI schema. The hot
paths authenticate through a cache, a class of their own; drf-spectacular
keeps one security scheme per class, so they get a second name for the very
same header and token."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "core.authentication.TokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            **build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token"),
            "description": "`Authorization: Token <token>`, the token from /api/auth/token or /api/auth/register",
        }


class CachedApiTokenScheme(ApiTokenScheme):
    target_class = "core.authentication.CachedTokenAuthentication"
    name = "apiTokenHotPath"
