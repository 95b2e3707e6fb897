"""A payment-provider simulator for development (served under
/dev/payment-provider/ only while DEBUG is on): it takes a refund call, answers
a retried call with the same idempotency key as the first without acting twice,
and half a second later sends the signed refund confirmation to the shop's
webhook, so that `make run` shows a refund's whole loop."""

import json
import logging
import threading
import time

import urllib3
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from django_redis import get_redis_connection

from orders.signatures import sign

logger = logging.getLogger(__name__)
KEPT_SECONDS = 24 * 3600


@csrf_exempt
@require_POST
def refunds(request):
    key = request.headers.get("Idempotency-Key", "")
    try:
        call = json.loads(request.body)
        fields = {name: call[name] for name in ("refund_id", "payment_id", "amount", "currency")}
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"error": "refund_id, payment_id, amount and currency are required"}, status=400)
    if not key:
        return JsonResponse({"error": "Idempotency-Key is required"}, status=400)
    answer = json.dumps({"id": f"re_sim_{fields['refund_id']}", "status": "pending"})
    if get_redis_connection("default").set(f"dev-provider:{key}", answer, nx=True, ex=KEPT_SECONDS):
        threading.Thread(target=_confirm, args=(fields,), daemon=True).start()  # a retried call: no second refund
    return HttpResponse(answer, content_type="application/json")


def _confirm(fields: dict) -> None:
    time.sleep(0.5)
    body = json.dumps({"type": "refund", **fields, "status": "succeeded"}).encode()
    headers = {"Content-Type": "application/json",
               "Payment-Signature": sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)}  # fmt: skip
    try:
        response = urllib3.request("POST", settings.DEV_PROVIDER_WEBHOOK_URL, body=body, headers=headers, timeout=10)
        logger.info("dev provider: refund %s confirmed -> %s", fields["refund_id"], response.status)
    except urllib3.exceptions.HTTPError as error:
        logger.warning("dev provider: could not confirm refund %s: %r", fields["refund_id"], error)
