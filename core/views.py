"""JSON bodies for errors raised outside DRF views, so no client ever gets HTML
or a traceback from the shop."""

from django.http import JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.decorators.csrf import csrf_exempt

from core.errors import ErrorCode
from core.exceptions import error_body, infrastructure_error


@csrf_exempt  # a PUT to a path that matches no route is a 404, not a CSRF refusal
def not_found(request, exception=None):
    return JsonResponse(error_body(ErrorCode.NOT_FOUND, "Not found."), status=404)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: the JSON envelope under /api/, Django's page elsewhere (the admin)."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body(ErrorCode.CSRF_FAILED, f"CSRF check failed: {reason}"), status=403)
    return django_csrf_failure(request, reason)


def server_error(request):
    return JsonResponse(
        error_body(ErrorCode.INTERNAL_ERROR, "Something went wrong on our side; it has been logged."),
        status=500,
    )


class ServiceErrorMiddleware:
    """Outside DRF views (the admin, the probes): a database or Redis outage, or a
    body over the size limit, answers the JSON envelope with its 4xx/503 instead
    of a 500 page. Inside DRF, core.exceptions.api_exception_handler does the same."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        error = infrastructure_error(exception)
        if error is None:
            return None
        return JsonResponse(error_body(error.code, error.message, error.details), status=error.status)


class RefuseNulMiddleware:
    """A NUL in the path or the query string (`?status__exact=PAID%00`) is a 400:
    PostgreSQL refuses it in text, so a filter or search passing it on would be a
    500, and nothing the shop serves is named with one."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any(
            "\x00" in key or "\x00" in "".join(values) for key, values in request.GET.lists()
        ):
            return JsonResponse(error_body(ErrorCode.INVALID, "NUL characters are not allowed in URLs."), status=400)
        return self.get_response(request)
