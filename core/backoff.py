"""The one retry schedule of the shop's loops (consumers, the queue writer, the
relay): the wait doubles with each failure in a row, from `first`, up to `cap`."""


def backoff_seconds(failures: int, *, first: float, cap: float) -> float:
    """The wait after `failures` failures in a row (1: the first failure)."""
    return min(first * 2 ** max(failures - 1, 0), cap)
