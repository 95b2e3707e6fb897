"""The API's JSON parser: DRF's, bounded in size and depth, and text only.

DRF reads a request's stream directly, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE
(checked only by `request.body`) does not protect it; and a body nested
100,000 deep makes `json.load` raise RecursionError, which is no ValueError and
would be a 500. JSON may also spell a string that is not text: a lone surrogate
("\\ud800", not encodable as UTF-8, so an error message echoing it could not be
rendered). All of these become 4xx here, before any view sees the data. (NUL is
text: DRF's fields refuse it where it would reach the database, and a signed
webhook keeps it in fields the shop does not read.)
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
        _check(data)
        return data


def _check(data) -> None:
    """ParseError for a body nested deeper than MAX_DEPTH or holding a string
    (key or value) with a lone surrogate."""
    level, containers = 0, [data]
    _check_text(data)
    while containers:
        children = []
        for item in containers:
            values = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
            if isinstance(item, dict):
                for key in item:
                    _check_text(key)
            for value in values:
                if isinstance(value, dict | list):
                    children.append(value)
                else:
                    _check_text(value)
        level += 1
        if children and level >= MAX_DEPTH:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
        containers = children


def _check_text(value) -> None:
    if not isinstance(value, str):
        return
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ParseError("JSON strings may not contain lone surrogates (\\ud800-\\udfff).") from None
