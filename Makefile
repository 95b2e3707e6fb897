# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PY

.PHONY: run test stop services migrate seed lint install clean bench-tools cluster cluster-stop

# Development only: DEBUG on, with the development secrets. Everything else
# (the Docker image, a process started by hand) runs with DEBUG off and needs
# real SECRET_KEY and PAYMENT_WEBHOOK_SECRET.
run migrate seed: export DEBUG ?= 1

# Every process of `make run` adds its counters to one directory, so GET /metrics
# on the web server shows them all.
run: install services migrate seed
	@$(PY) manage.py kafka_topics
	@$(PY) scripts/banner.py
	@rm -rf .run/metrics && mkdir -p .run/metrics
	PROMETHEUS_MULTIPROC_DIR=$(CURDIR)/.run/metrics $(VENV)/bin/honcho start -f Procfile

test: install services lint
	@bash scripts/install_browser.sh
	@bash scripts/install_nginx.sh
	$(PY) -m pytest

# Reinstall only when requirements.txt changed since the last install.
install: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

services: install
	@scripts/services.sh start

migrate: install
	$(PY) manage.py migrate --noinput

seed: install
	$(PY) manage.py seed_demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The benchmarks' load generator (bench/README.md): wrk, from the distribution's packages.
bench-tools:
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }

# Several nodes on this machine: HAProxy, two nodes, Redis with Sentinel (docs/operations.md, "Scaling out").
cluster: install
	@PY=$(PY) scripts/cluster.sh start

cluster-stop:
	@PY=$(PY) scripts/cluster.sh stop

stop:
	@PY=$(PY) scripts/services.sh stop

clean: stop
	rm -rf $(VENV) .run .pytest_cache .ruff_cache
