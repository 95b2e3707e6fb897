from django.core.management.base import BaseCommand, CommandError

from core.exceptions import DomainError
from core.formatting import format_units
from core.money import format_money
from orders.models import Order, Return
from orders.services import (
    ReturnLineRequest,
    approve_return,
    receive_return,
    reject_return,
    request_return,
)


def units(text: str) -> ReturnLineRequest:
    sku, _, quantity = text.rpartition(":")
    if not sku or not quantity.isdigit() or int(quantity) < 1:
        raise ValueError(text)
    return ReturnLineRequest(sku=sku, quantity=int(quantity))


class Command(BaseCommand):
    help = (
        "Returns from the command line: list the open ones, request one for a shopper, approve, reject, "
        "or receive one (each line restocked unless named with --damaged), which refunds the received units."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="returns in a status (default REQUESTED and APPROVED)")
        listing.add_argument("--status", choices=Return.Status.values, action="append")
        request = actions.add_parser("request", help="a return of a shipped order, as its shopper would ask it")
        request.add_argument("order_id", type=int)
        request.add_argument("lines", nargs="+", type=units, metavar="SKU:UNITS")
        request.add_argument("--reason", default="")
        for name in ("approve", "reject"):
            actions.add_parser(name, help=f"{name} a requested return").add_argument("return_id", type=int)
        receive = actions.add_parser("receive", help="the parcel arrived: restock its lines, or write them off")
        receive.add_argument("return_id", type=int)
        receive.add_argument("--damaged", action="append", default=[], metavar="SKU", help="write this line off")

    def handle(self, *args, action, **options):
        try:
            getattr(self, action)(**options)
        except DomainError as refused:
            raise CommandError(f"{refused.message} {refused.details or ''}".strip()) from None

    def list(self, *, status, **options):
        returns = Return.objects.filter(status__in=status or [Return.Status.REQUESTED, Return.Status.APPROVED])
        for each in returns.order_by("id").prefetch_related("lines__item"):
            lines = ", ".join(format_units(line.quantity, line.item.product_id) for line in each.lines.all())
            self.stdout.write(f"return {each.id} of order {each.order_id}: {each.status}, {lines} ({each.reason})")

    def request(self, *, order_id, lines, reason, **options):
        customer_id = Order.objects.filter(id=order_id).values_list("customer_id", flat=True).first()
        returned = request_return(customer_id=customer_id or 0, order_id=order_id, lines=lines, reason=reason)
        self.stdout.write(f"return {returned.id} of order {order_id}: REQUESTED")

    def approve(self, *, return_id, **options):
        self.stdout.write(f"return {approve_return(return_id=return_id).id}: APPROVED")

    def reject(self, *, return_id, **options):
        self.stdout.write(f"return {reject_return(return_id=return_id).id}: REJECTED")

    def receive(self, *, return_id, damaged, **options):
        skus = list(Return.objects.filter(id=return_id).values_list("lines__item__product_id", flat=True))
        unknown = sorted(set(damaged) - set(skus))
        if unknown:
            raise CommandError(f"not lines of return {return_id}: {', '.join(unknown)}")
        conditions = {sku: "damaged" if sku in damaged else "restock" for sku in skus if sku}
        received = receive_return(return_id=return_id, conditions=conditions)
        refund = received.refund
        money = format_money(refund.amount, refund.currency) if refund else "nothing (no money left to give back)"
        self.stdout.write(f"return {return_id}: RECEIVED, {money} refunded")
