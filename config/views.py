"""JSON bodies for errors raised outside DRF views, so no client ever gets HTML
or a traceback from the shop."""

from django.http import JsonResponse

from config.exceptions import error_body


def not_found(request, exception=None):
    return JsonResponse(error_body("not_found", "Not found."), status=404)


def server_error(request):
    return JsonResponse(
        error_body("internal_error", "Something went wrong on our side; it has been logged."),
        status=500,
    )
