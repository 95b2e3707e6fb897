from core.backoff import backoff_seconds


def test_the_wait_doubles_from_the_first_and_stops_at_the_cap():
    waits = [backoff_seconds(failures, first=0.25, cap=1.5) for failures in range(1, 6)]
    assert waits == [0.25, 0.5, 1.0, 1.5, 1.5]
    assert backoff_seconds(0, first=0.1, cap=5) == 0.1  # no failure yet: the first wait
