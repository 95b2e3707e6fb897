from django.core.management.base import BaseCommand, CommandError

from core.exceptions import DomainError
from core.money import format_money
from orders.services import refund_goodwill


class Command(BaseCommand):
    help = "Give back part of a captured order's money without a return (a goodwill refund), with a reason."

    def add_arguments(self, parser):
        parser.add_argument("order_id", type=int)
        parser.add_argument("--amount", type=int, required=True, help="minor units (cents): 1299 = 12.99")
        parser.add_argument("--reason", required=True, help="why, for the shopper's file")

    def handle(self, *args, order_id, amount, reason, **options):
        if amount < 1:
            raise CommandError("--amount must be at least 1 minor unit")
        try:
            refund = refund_goodwill(order_id=order_id, amount=amount, note=reason[:200])
        except DomainError as refused:
            raise CommandError(f"{refused.message} {refused.details or ''}".strip()) from None
        money = format_money(refund.amount, refund.currency)
        self.stdout.write(f"refund {refund.id} of order {order_id}: {money} requested")
