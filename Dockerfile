# The shop's one image: web (the default command), Celery worker and beat, the
# outbox relay and the Kafka consumers all run from it with another command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=config.settings \
    WEB_BIND=0.0.0.0:8000 \
    WEB_WORKERS=2 \
    WEB_THREADS=4

# Every dependency ships as a binary wheel (psycopg[binary], confluent-kafka,
# hiredis), so the image needs no compiler and no libpq headers.
RUN python -m venv "$VIRTUAL_ENV"
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt

# The code belongs to root and is read-only for the user that runs it.
# WhiteNoise serves static files through the finders (no collectstatic); the
# empty STATIC_ROOT only spares its "no directory" warning.
COPY . .
RUN python -m compileall -q core config shop cart inventory orders outbox \
    && mkdir -p staticfiles \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent shop

USER shop
EXPOSE 8000

# Workers add their metrics up in PROMETHEUS_MULTIPROC_DIR (core/metrics.py creates it).
ENV PROMETHEUS_MULTIPROC_DIR=/dev/shm/metrics
CMD ["gunicorn", "config.wsgi", "--config", "python:config.gunicorn", "--worker-tmp-dir", "/dev/shm"]
