"""core/redis_scripts.py: one EVALSHA per call, and the script loaded again when
Redis has forgotten it (a restart, SCRIPT FLUSH)."""

from core.redis_scripts import run_script
from tests.helpers import redis_commands

ECHO = "return {KEYS[1], ARGV[1]}"


def test_a_script_runs_in_one_round_trip_and_again_after_redis_forgets_it(redis, monkeypatch):
    assert run_script(ECHO, keys=["k"], args=["v"]) == [b"k", b"v"]
    redis.script_flush()
    sent = redis_commands(redis, monkeypatch, count_reloads=True)

    assert run_script(ECHO, keys=["k"], args=["again"]) == [b"k", b"again"]  # NOSCRIPT, loaded, run
    assert run_script(ECHO, keys=["k"], args=["once"]) == [b"k", b"once"]

    assert sent == ["EVALSHA", "SCRIPT LOAD", "EVALSHA", "EVALSHA"]


def test_lua_constants_reach_a_script_as_python_wrote_them(redis):
    from core.redis_scripts import compose, lua_constants

    script = compose(lua_constants(STALE=-1, SUFFIX="|limit_reached"), "return {STALE, SUFFIX}")
    assert run_script(script, keys=[], args=[]) == [-1, b"|limit_reached"]


def test_no_script_repeats_a_status_code_or_a_refusal_suffix_python_owns():
    """cart/storage.py and inventory/gate.py own them (lua_constants): a script that
    spelled one out again would drift from Python unnoticed."""
    import re
    from pathlib import Path

    from django.conf import settings

    spelled_out = re.compile(r"return \{?-[1-9]|'\|(limit_reached|rate_limited)'")
    scripts = sorted(Path(settings.BASE_DIR).glob("*/lua/*.lua"))
    assert len(scripts) > 15
    assert [str(path) for path in scripts if spelled_out.search(path.read_text())] == []


def test_a_thread_runs_its_scripts_on_one_connection_that_survives_redis_dropping_it(redis):
    import threading

    from core.redis_scripts import script_client

    run_script(ECHO, keys=["k"], args=["v"])
    mine = script_client("default").connection
    run_script(ECHO, keys=["k"], args=["v"])
    assert script_client("default").connection is mine  # kept, not taken from the pool per call
    others = []
    thread = threading.Thread(target=lambda: others.append(script_client("default").connection))
    thread.start()
    thread.join()
    assert others[0] is not mine  # each thread its own

    host, port = mine._sock.getsockname()[:2]
    assert redis.client_kill(f"{host}:{port}")  # as a Redis restart or a timeout would
    assert run_script(ECHO, keys=["k"], args=["after"]) == [b"k", b"after"]  # redis-py's retry connects again


def test_a_new_caches_setting_gets_a_new_client(settings):
    from core.redis_scripts import script_client

    before = script_client("default")
    settings.CACHES = {**settings.CACHES}
    assert script_client("default") is not before
