"""Refusals of a sold-out flash sale, answered before authentication, DRF and
the rest of Django's middleware.

Once a sale is sold out, nearly every checkout a busy process serves is a
refusal, and through the ordinary path each costs the session, CSRF and
authentication middleware, DRF's dispatch and the view before the one Lua
call that decides it. For `POST /api/orders` without a body, with a token
this process holds in memory (or Redis holds: one call more) and while this
process has heard from the gate that a sale is sold out, this middleware asks
that call's question first (orders.services.admission.early_refusal): the
gate's refusal (409) or the rate limit's (429) is answered here with the body
and headers the view would send; any other answer lets the request take the
ordinary path, which decides it as before. Nothing here is a second rule: the verdict is the
gate's, from the same Lua functions. Once the gate refused a shopper, that shopper's checkouts
get the same refusal from process memory with no Redis call at all, for as long as the gate,
asked once every SOLD_OUT_MEMORY_MS, says nothing changed (admission.RefusalMemory).
"""

from django.conf import settings
from django.http import HttpResponse
from django.urls import resolve, reverse
from rest_framework.renderers import JSONRenderer

from core.authentication import remembered_user
from core.exceptions import DomainError, error_body
from core.hotcache import hot_cache
from orders.apis import idempotency_key_from
from orders.services import admission

_json = JSONRenderer()


_bodies: dict[tuple, bytes] = {}  # a sale's few refusals, rendered once (a profile gave rendering 7 % of a refusal)


def _body(refusal: DomainError) -> bytes:
    key = (refusal.code, refusal.message, tuple(sorted((refusal.details or {}).items())))
    body = _bodies.get(key)
    if body is None:
        if len(_bodies) >= 1000:
            _bodies.clear()
        body = _bodies[key] = _json.render(error_body(refusal.code, refusal.message, refusal.details))
    return body


class EarlyRefusalMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.path = None
        self.match = None

    def __call__(self, request):
        if hot_cache.sold_out and request.method == "POST":
            if self.path is None:
                self.path = reverse("orders")
                self.match = resolve(self.path)
            if request.path_info == self.path and (refusal := self.refusal(request)) is not None:
                return self.respond(request, refusal)
        return self.get_response(request)

    def refusal(self, request) -> DomainError | None:
        meta = request.META
        if meta.get("CONTENT_LENGTH") not in (None, "", "0") or "HTTP_TRANSFER_ENCODING" in meta:
            return None  # a body to validate first: the view does it
        user = remembered_user(meta.get("HTTP_AUTHORIZATION", ""), or_from_redis=True, generation_checked=True)
        if user is None:
            return None
        try:
            key = idempotency_key_from(request)
        except DomainError:
            return None
        return admission.early_refusal(customer_id=user.id, idempotency_key=key)

    def respond(self, request, refusal: DomainError) -> HttpResponse:
        request.resolver_match = self.match  # the route of the request's metrics and log line
        response = HttpResponse(_body(refusal), status=refusal.status, content_type=_json.media_type)
        for name, value in getattr(refusal, "headers", {}).items():
            response[name] = value
        # What the ordinary path adds (tests/orders/test_early_refusal.py compares them): DRF's
        # Allow, CommonMiddleware's Content-Length, the clickjacking middleware's header.
        response["Allow"] = "GET, POST, HEAD, OPTIONS"
        response["Content-Length"] = str(len(response.content))
        response["X-Frame-Options"] = settings.X_FRAME_OPTIONS
        return response
