from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config.health import healthz, readyz
from config.metrics import metrics_view
from core.views import not_found

# The payment simulator signs webhooks with the webhook secret: only with DEBUG and the development secret
# (a DEBUG host someone can reach, with a real secret, must not let anyone mark orders paid).
SIMULATOR = settings.DEBUG and settings.PAYMENT_WEBHOOK_SECRET == settings.DEV_PAYMENT_WEBHOOK_SECRET

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    *(
        [
            path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
            path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
        ]
        if settings.API_DOCS
        else []
    ),
    # The busiest first: Django tries the patterns in order, every request.
    path("api/", include("cart.urls")),
    path("api/", include("inventory.urls")),
    # orders before shop: orders' auth/me (GET shop's view, DELETE the erasure) must win.
    path("api/", include("orders.urls")),
    path("api/", include("shop.urls")),
    *([path("dev/payment-provider/", include("config.dev_provider_urls"))] if SIMULATOR else []),
    # Last: whatever else is under /api/ is a JSON 404, even with DEBUG on
    # (Django's technical 404 page would list the URL patterns).
    re_path(r"^api/", not_found),
]

handler404 = "core.views.not_found"
handler500 = "core.views.server_error"
