from django.urls import include, path
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView


class BoomApi(APIView):
    permission_classes = [AllowAny]

    def get(self, request):
        raise RuntimeError("secret internals: password=hunter2")


def plain_boom(request):
    raise RuntimeError("secret internals: password=hunter2")


urlpatterns = [
    path("boom", BoomApi.as_view()),
    path("plain-boom", plain_boom),
    path("", include("config.urls")),
]

handler404 = "core.views.not_found"
handler500 = "core.views.server_error"
