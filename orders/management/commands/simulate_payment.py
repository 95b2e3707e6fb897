import json
import urllib.error
import urllib.request
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.test import Client

from orders.models import Order, Refund
from orders.signatures import sign


class Command(BaseCommand):
    help = (
        "Pay for an order as the payment provider would: a signed webhook to the running shop. "
        "With --refund ID instead: the provider's confirmation of that refund."
    )

    def add_arguments(self, parser):
        parser.add_argument("order_id", type=int, nargs="?")
        parser.add_argument("--refund", type=int, metavar="REFUND_ID", help="confirm this refund instead")
        parser.add_argument(
            "--status",
            choices=["succeeded", "authorized", "captured", "failed"],
            default="succeeded",
            help="succeeded: authorized and captured at once (default); authorized: money held; captured: taken",
        )
        parser.add_argument("--amount", type=int, help="minor units (default: the order's total)")
        parser.add_argument("--currency", help="default: the order's currency")
        parser.add_argument("--payment-id", help="default: a new random id (reuse one to redeliver)")
        parser.add_argument("--url", default="http://127.0.0.1:8000/api/payments/webhook")
        parser.add_argument("--local", action="store_true", help="call the view in this process, no server")

    def handle(self, *args, order_id, refund, status, amount, currency, payment_id, url, local, **options):
        if (order_id is None) == (refund is None):
            raise CommandError("give an order id, or --refund REFUND_ID")
        body = json.dumps(
            self.refund_body(refund, status, amount, currency)
            if refund
            else self.payment_body(order_id, status, amount, currency, payment_id)
        ).encode()
        signature = sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)
        if local:
            response = Client().post(
                "/api/payments/webhook", body, content_type="application/json", HTTP_PAYMENT_SIGNATURE=signature
            )
            code, text = response.status_code, response.content.decode()
        else:
            request = urllib.request.Request(
                url, data=body, headers={"Content-Type": "application/json", "Payment-Signature": signature}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    code, text = response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                code, text = error.code, error.read().decode()
            except urllib.error.URLError as error:
                raise CommandError(f"cannot reach {url}: {error.reason} (is `make run` up? or use --local)") from None
        self.stdout.write(f"sent {body.decode()}\n-> {code} {text}")
        if code >= 400:
            raise CommandError(f"the shop answered {code}")

    def payment_body(self, order_id, status, amount, currency, payment_id) -> dict:
        order = Order.objects.filter(id=order_id).first()
        if order is None and (amount is None or currency is None):
            raise CommandError(f"no order {order_id}: give --amount and --currency to send an orphan payment")
        return {
            "payment_id": payment_id or f"sim_{uuid.uuid4().hex}",
            "order_id": order_id,
            "amount": order.total_amount if amount is None else amount,
            "currency": currency or order.currency,
            "status": status,
        }

    def refund_body(self, refund_id, status, amount, currency) -> dict:
        refund = Refund.objects.select_related("payment").filter(id=refund_id).first()
        if refund is None:
            raise CommandError(f"no refund {refund_id}")
        return {
            "type": "refund",
            "refund_id": refund.id,
            "payment_id": refund.payment.provider_payment_id,
            "amount": refund.amount if amount is None else amount,
            "currency": currency or refund.currency,
            "status": status,
        }
