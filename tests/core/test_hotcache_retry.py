"""HotCacheApiView: a StaleCache met mid-request drops the process's caches and
the request is served once more, transparently; a second one in a row is the
client's 503. The retry is a fresh DRF dispatch: authentication and body parsing
run again, on the same Django request."""

import pytest
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory

from core.hotcache import HotCacheApiView, StaleCache, hot_cache

factory = APIRequestFactory()


class CountingAuthentication(BaseAuthentication):
    calls = 0

    def authenticate(self, request):
        type(self).calls += 1
        return (None, None)


class FlakyApi(HotCacheApiView):
    """Raises StaleCache on the first `stale_times` runs of its handler."""

    authentication_classes = [CountingAuthentication]
    permission_classes = [AllowAny]
    throttle_classes = []
    stale_times = 1
    runs: list = []

    def get(self, request):
        return self.serve(request, None)

    def put(self, request):
        return self.serve(request, request.data)

    def serve(self, request, data):
        type(self).runs.append({"request": id(request), "data": data, "cache_cleared": hot_cache.generation is None})
        if len(type(self).runs) <= self.stale_times:
            hot_cache.generation = "stale"  # what this process believes, until the retry drops it
            raise StaleCache()
        return Response({"served": data})


@pytest.fixture(autouse=True)
def fresh_counts():
    FlakyApi.runs = []
    CountingAuthentication.calls = 0


def test_a_stale_cache_is_dropped_and_the_request_served_again_transparently():
    response = FlakyApi.as_view()(factory.get("/flaky"))
    assert response.status_code == 200 and response.data == {"served": None}
    assert len(FlakyApi.runs) == 2
    assert FlakyApi.runs[1]["cache_cleared"]  # the retry starts from empty caches
    assert FlakyApi.runs[0]["request"] != FlakyApi.runs[1]["request"]  # a new DRF Request ...
    assert CountingAuthentication.calls == 2  # ... authenticated anew


def test_the_retry_parses_the_body_again():
    request = factory.put("/flaky", {"quantity": 3}, format="json")
    response = FlakyApi.as_view()(request)
    assert response.status_code == 200 and response.data == {"served": {"quantity": 3}}
    assert [run["data"] for run in FlakyApi.runs] == [{"quantity": 3}, {"quantity": 3}]


def test_a_second_stale_cache_in_a_row_reaches_the_client():
    response = FlakyApi.as_view(stale_times=2)(factory.put("/flaky", {"quantity": 1}, format="json"))
    assert response.status_code == 503
    assert response.data["error"]["code"] == "catalog_changing"
    assert len(FlakyApi.runs) == 2  # retried once, not more


def test_without_a_stale_cache_the_handler_runs_once():
    response = FlakyApi.as_view(stale_times=0)(factory.put("/flaky", {"quantity": 2}, format="json"))
    assert response.status_code == 200 and len(FlakyApi.runs) == 1 and CountingAuthentication.calls == 1


def test_the_view_touches_no_private_attribute_of_drf_requests():
    import inspect

    import core.hotcache

    source = inspect.getsource(core.hotcache.HotCacheApiView)
    for private in ("_request", "_data", "_full_data", "_user", "_auth", "_authenticator", "__dict__"):
        assert f".{private}" not in source and f'"{private}"' not in source, private
