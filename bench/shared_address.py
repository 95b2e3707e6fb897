"""Shoppers behind one client address, black-box: a flash sale and voucher codes over HTTP for established and for
fresh accounts, with the settings' per-address caps (bench/README.md).

python -m bench.shared_address [--accounts 120 --stock 30]"""

import json
import sys
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import Value
from django.db.models.functions import Concat, Lower
from django.utils import timezone
from django_redis import get_redis_connection

from bench import harness as h
from core.ratelimit import shopper_window, window_key
from inventory.services.flash_sales import seed_flash_sale
from orders.models import Order
from orders.services.holds import held_units
from shop.models import Account

PREFIX = "BENCH-SA-"
SKU, ADDRESS = f"{PREFIX}FLASH", h.HOST  # every request comes from the bench's own address
# The settings' defaults: the harness lifts the hoarding caps for the other benches' shoppers.
CAPS = {"MAX_UNPAID_UNITS_PER_SKU": "10", "MAX_UNPAID_UNITS_PER_ADDRESS": "20", "MAX_PENDING_ORDERS_PER_CUSTOMER": "3"}
CAPS |= {"NEW_ACCOUNT_SECONDS": "3600", "RATE_LIMIT_VOUCHER_ADDRESS": "60/hour", "RATE_LIMIT_VOUCHER": "20/hour"}


def make_accounts(count: int, *, established: bool) -> list[h.Shopper]:
    """Shoppers with tokens (remembered in Redis as the token API does, facts and all): a month old with their e-mail
    verified, or made just now with nothing verified."""
    prefix = f"{PREFIX}{'E' if established else 'F'}"
    ids = h.ensure_users(count, prefix=prefix)
    joined = timezone.now() - timedelta(days=30) if established else timezone.now()
    email = Concat(Lower("username"), Value("@bench.invalid"))
    get_user_model().objects.filter(id__in=ids).update(email=email, date_joined=joined)  # tokens made afresh below
    Account.objects.filter(customer_id__in=ids).delete()
    if established:
        emails = get_user_model().objects.filter(id__in=ids).values_list("id", "email")
        verified = [Account(customer_id=i, verified_email=e, email_verified_at=timezone.now()) for i, e in emails]
        Account.objects.bulk_create(verified)
    return h.ensure_shoppers(count, prefix=prefix)


def request(server: h.Gunicorn, shopper: h.Shopper, method: str, path: str, body: dict | None = None, key: str = ""):
    """(status, error code or "") of one request of the shopper's."""
    headers = {"Authorization": f"Token {shopper.token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    data = json.dumps(body).encode() if body is not None else b""
    sent = urllib.request.Request(server.base_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, ""
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}").get("error", {}).get("code", "")


def scenario(server: h.Gunicorn, shoppers: list[h.Shopper], stock: int, run: str, threads: int) -> dict:
    """A sale of `stock` units: every shopper enters an unknown voucher code, then checks out one unit."""
    ids = [s.user_id for s in shoppers]
    h.delete_orders(ids)
    redis = get_redis_connection("default")
    redis.delete(window_key("voucher_address", ADDRESS), *[shopper_window("voucher", i).key for i in ids])
    seed_flash_sale(sku=SKU, stock=stock, price=999, name="Bench shared-address item")
    h.fill_carts([(i, {SKU: 1, **h.SHIPS}) for i in ids])
    with ThreadPoolExecutor(threads) as pool:
        code = {"code": f"NO-SUCH-{run}"}
        entered = list(pool.map(lambda s: request(server, s, "PUT", "/api/cart/voucher", code), shoppers))
        bought = list(pool.map(lambda s: request(server, s, "POST", "/api/orders", key=f"sa-{run}"), shoppers))
    return {
        "checkouts": Counter(code or status for status, code in bought),
        "orders": Order.objects.filter(customer_id__in=ids, items__product_id=SKU).count(),
        "held": held_units(sku=SKU, address=ADDRESS),
        "vouchers": Counter(code or status for status, code in entered),
    }


def shown(counts: Counter) -> str:
    return ", ".join(f"{key} {count}" for key, count in sorted(counts.items(), key=lambda kv: -kv[1]))


def cleanup() -> None:
    ids = h.user_ids(PREFIX)
    h.delete_orders(ids)
    h.end_sale(SKU)
    keys = [window_key("voucher_address", ADDRESS), *[shopper_window("voucher", i).key for i in ids]]
    get_redis_connection("default").delete(*keys)


def main(argv=None) -> int:
    args = h.parse(
        argv,
        __doc__,
        "workers",
        "threads",
        "concurrency",
        accounts=(120, "accounts of each kind"),
        stock=(30, "units on sale in each scenario"),
    )
    h.setup()
    run = uuid.uuid4().hex[:8]
    with h.lock_or_exit("shared_address", cleanup):
        h.ensure_products([SKU], 0)
        h.ensure_shipping_and_tax([SKU])
        kinds = {
            "established (a month old, e-mail verified)": make_accounts(args.accounts, established=True),
            "fresh (made just now, nothing verified)": make_accounts(args.accounts, established=False),
        }
        caps = ", ".join(f"{name}={value}" for name, value in CAPS.items())
        server_ = f"gunicorn {args.workers} x {args.threads} threads, {args.concurrency} requests in flight"
        print(f"shared-address probe {run}: one client address ({ADDRESS}), {SKU} {args.stock} units each time")
        print(f"  {server_}; {caps}")
        with h.Gunicorn(workers=args.workers, threads=args.threads, env=CAPS) as server:
            for n, (kind, shoppers) in enumerate(kinds.items()):
                got = scenario(server, shoppers, args.stock, f"{run}-{n}", args.concurrency)
                print(f"  {len(shoppers)} {kind}:")
                held = f"orders {got['orders']}, units the address holds {got['held']}"
                print(f"    checkouts: {shown(got['checkouts'])}; {held}")
                print(f"    voucher codes entered: {shown(got['vouchers'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
