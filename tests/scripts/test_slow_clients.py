"""scripts/slow_clients.py: the documented front (nginx, deploy/nginx.conf.template)
keeps /healthz answering while 50 clients trickle their requests; gunicorn alone does not."""

import importlib.util
import re
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slow_clients.py"
_spec = importlib.util.spec_from_file_location("slow_clients", _SCRIPT)
slow_clients = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slow_clients)

pytestmark = pytest.mark.slow


def test_fifty_slow_clients_stall_gunicorn_alone_but_not_the_front(capsys):
    assert slow_clients.main(["--clients", "50", "--seconds", "5", "--direct"]) == 0
    out = capsys.readouterr().out
    answered = {
        name: (int(ok), int(sent))
        for name, ok, sent in re.findall(r"^(through nginx|gunicorn alone): .* answered (\d+)/(\d+)", out, re.MULTILINE)
    }
    front_ok, front_sent = answered["through nginx"]
    alone_ok, alone_sent = answered["gunicorn alone"]
    assert front_sent >= 8 and front_ok == front_sent, out
    assert alone_ok < alone_sent, out  # the drill's clients do stall an unprotected server
