"""Printed by `make run` before the processes start."""

import os

base = "http://" + os.environ.get("WEB_BIND", "127.0.0.1:8000")
print(
    f"""
  The shop is starting (Ctrl-C stops every process).
    API         {base}/api/
    API docs    {base}/api/docs/
    Admin       {base}/admin/        (admin / admin)
    Health      {base}/healthz  {base}/readyz
    Metrics     {base}/metrics
    Payments    http://127.0.0.1:8001/dev/payment-provider/  (the simulator, its own process)
  Processes: web (gunicorn), provider (the payment simulator), worker + beat (Celery),
  relay (outbox -> Kafka), warehouse / email / loyalty / payments (Kafka consumers),
  writer (queue-mode flash sales).
  `DEBUG=1 .venv/bin/python manage.py shop_status` shows the state.
"""
)
