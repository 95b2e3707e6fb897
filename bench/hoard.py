"""How many units one client address keeps off sale with fresh accounts, without and with the caps (bench/README.md).

python -m bench.hoard [--accounts 10] [--stock 145]"""

import sys
import uuid

from django.conf import settings
from django.utils import timezone

from bench import harness as h
from core.exceptions import DomainError
from inventory.services.stock import set_available_stock
from orders.models import Order
from orders.services import place_order

PREFIX = "BENCH-HOARD-"
SKU, ADDRESS = f"{PREFIX}MUG", "192.0.2.99"


def probe(accounts: list[int], *, caps: dict, run: str) -> tuple[int, float]:
    """(units held, seconds until the first of them is back on sale)."""
    for name, value in caps.items():
        setattr(settings, name, value)
    held, who = 0, dict(client_address=ADDRESS, account_created_at=timezone.now())
    for n, customer in enumerate(accounts):
        for attempt in range(settings.MAX_PENDING_ORDERS_PER_CUSTOMER):
            for quantity in (99, 50, 20, 10, 5, 2, 1):
                h.fill_carts([(customer, {SKU: quantity})])
                key = f"{run}-{n}-{attempt}-{quantity}"
                try:
                    place_order(customer_id=customer, idempotency_key=key, **who)
                except DomainError:
                    continue
                held += quantity
                break
    first = Order.objects.filter(customer_id__in=accounts, status="PENDING_PAYMENT").order_by("expires_at").first()
    return held, (first.expires_at - first.created_at).total_seconds() if first else 0.0


def main(argv=None) -> int:
    args = h.parse(argv, __doc__, accounts=(10, "accounts made just now"), stock=(145, "units of the SKU"))
    h.setup()
    accounts = h.ensure_users(args.accounts, prefix=f"{PREFIX}A")
    run = uuid.uuid4().hex[:8]
    h.ensure_products([SKU], 0)
    # The settings' defaults (the bench harness lifts them for the other benches' shoppers).
    after = dict(MAX_UNPAID_UNITS_PER_SKU=10, MAX_UNPAID_UNITS_PER_ADDRESS=20, MAX_PENDING_ORDERS_PER_CUSTOMER=3)
    after["NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS"] = 300
    lifted = dict.fromkeys(["MAX_UNPAID_UNITS_PER_SKU", "MAX_UNPAID_UNITS_PER_ADDRESS"], 10**9)
    before = after | lifted | {"NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS": 900}
    print(f"hoard probe {run}: one address, {args.accounts} accounts made just now, {SKU} with {args.stock} units")
    try:
        for name, caps in (("before (no unpaid-hold caps)", before), ("after (the settings' caps)", after)):
            h.delete_orders(accounts)
            set_available_stock(sku=SKU, available=args.stock, note="hoard probe")
            held, hold_seconds = probe(accounts, caps=caps, run=f"{run}-{name[:5]}")
            held_units = f"{held} of {args.stock} units held unpaid ({held / args.stock:.0%})"
            print(f"  {name}: {held_units}, for {hold_seconds:.0f} s; caps {caps}")
    finally:
        h.delete_orders(accounts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
