"""The API's JSON parser: DRF's, bounded in size and depth.

DRF reads a request's stream directly, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE
(checked only by `request.body`) does not protect it; and a body nested
100,000 deep makes `json.load` raise RecursionError, which is no ValueError and
would be a 500. Both become 4xx here, before any view sees the data.
"""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import parsers
from rest_framework.exceptions import ParseError

# Deeper than any body the API documents needs (the webhook's extra fields included).
MAX_DEPTH = 32


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")  # a 413
        encoding = parsers.get_encoding(parser_context or {})
        try:
            data = parsers.json.loads(body.decode(encoding), parse_constant=parsers.json.strict_constant)
        except ValueError as exc:  # UnicodeDecodeError included
            raise ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.") from None
        if _depth_exceeds(data, MAX_DEPTH):
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
        return data


def _depth_exceeds(data, limit: int) -> bool:
    level, containers = 0, [data]
    while containers:
        children = []
        for item in containers:
            if isinstance(item, dict):
                children.extend(v for v in item.values() if isinstance(v, dict | list))
            elif isinstance(item, list):
                children.extend(v for v in item if isinstance(v, dict | list))
        level += 1
        if children and level >= limit:
            return True
        containers = children
    return False
