"""core/redis_scripts.py: one EVALSHA per call, and the script loaded again when
Redis has forgotten it (a restart, SCRIPT FLUSH)."""

from core.redis_scripts import run_script
from tests.helpers import redis_commands

ECHO = "return {KEYS[1], ARGV[1]}"


def test_a_script_runs_in_one_round_trip_and_again_after_redis_forgets_it(redis, monkeypatch):
    assert run_script(ECHO, keys=["k"], args=["v"]) == [b"k", b"v"]
    redis.script_flush()
    sent = redis_commands(redis, monkeypatch)

    assert run_script(ECHO, keys=["k"], args=["again"]) == [b"k", b"again"]  # NOSCRIPT, loaded, run
    assert run_script(ECHO, keys=["k"], args=["once"]) == [b"k", b"once"]

    assert sent == ["EVALSHA", "SCRIPT LOAD", "EVALSHA", "EVALSHA"]
