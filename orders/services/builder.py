"""The one way an order is built, for both paths that write orders: direct
checkout (orders/services/checkout.py) and the flash-sale queue's writer
(orders/services/queue_writing.py). From the cart's priced lines it decides the
order's values (total, payment deadline, items), its request hash and the
payload of the event that announces it; the two paths only differ in how they
send the rows (one INSERT each, or COPY for a batch). A cart is priced by the
shop's one pricing function (shop/pricing.py: the catalog's prices, then the
automatic promotions), as the cart view prices it.
"""

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property

from django.utils import timezone

from orders.exceptions import ProductUnavailable
from orders.models import OrderStatus
from outbox.services import NewEvent
from shop.exceptions import ShippingMethodRequired
from shop.promotions import check_voucher
from shop.selectors import cached_products, cached_voucher, priced_order, shipping_for
from shop.totals import shipping_weight, tax_lines


@dataclass(frozen=True)
class PricedLine:
    sku: str
    name: str
    quantity: int
    unit_price: int  # minor units, the catalog's
    discount: int = 0  # minor units off the whole line
    tax_rate: int = 0  # basis points
    tax: int = 0
    gross: int | None = None  # what the line is charged; None (queued before tax existed): its total

    @property
    def amount(self) -> int:
        """The line at the catalog price."""
        return self.quantity * self.unit_price

    @property
    def total(self) -> int:
        """After its discount, in the catalog's terms."""
        return self.amount - self.discount

    @property
    def charged(self) -> int:
        return self.total if self.gross is None else self.gross


@dataclass(frozen=True)
class CartPrice:
    lines: list[PricedLine]  # in SKU order
    discounts: list[dict]  # the promotions that took something off: {"promotion_id", "name", "code", "amount"}
    charges: "OrderCharges"


@dataclass(frozen=True)
class OrderCharges:
    """What an order costs beyond its goods' prices, as its draft carries it."""

    prices_include_tax: bool = True
    tax_country: str = ""
    shipping: dict | None = None  # shop.totals.ShippingCharge.as_json() and its "country"

    @property
    def shipping_amount(self) -> int:
        return self.shipping["gross"] if self.shipping else 0

    @property
    def shipping_tax(self) -> int:
        return self.shipping["tax"] if self.shipping else 0


def price_cart(
    lines: dict[str, int],
    *,
    country: str,
    voucher_code: str | None = None,
    shipping_code: str | None = None,
    now: datetime | None = None,
) -> CartPrice:
    """The cart priced at `now` (default: now) as the cart view prices it
    (shop/totals.py price_order): the catalog's prices, the automatic
    promotions, the cart's voucher, its shipping method and the tax rates of
    `country`, all from the hot cache (filled through the ORM, kept honest by
    the generation the admission script has just checked in Redis), so a warm
    checkout prices its cart without a query. ProductUnavailable for a SKU not
    (or no longer) on sale; a voucher the cart can no longer use is refused (its
    422: the shopper removes it or changes the cart), never silently dropped;
    so is a shipping method (ShippingMethodRequired when the goods ship and none
    was chosen, ShippingMethodUnavailable when it does not ship to `country` or
    cannot carry them)."""
    now = now or timezone.now()
    skus = sorted(lines)
    products = cached_products(skus=skus)
    for sku in skus:
        product = products.get(sku)
        if product is None or not product.is_active:
            raise ProductUnavailable(sku=sku)
    voucher = None
    if voucher_code is not None:
        voucher = check_voucher(cached_voucher(voucher_code), voucher_code, now=now, lines=lines, products=products)
    shipping, weight = None, shipping_weight(lines, products)
    if weight:
        if shipping_code is None:
            raise ShippingMethodRequired()
        shipping = shipping_for(shipping_code, country=country, weight_grams=weight)
    totals = priced_order(lines, products=products, voucher=voucher, now=now, country=country, shipping=shipping)
    return CartPrice(
        [
            PricedLine(
                line.sku,
                products[line.sku].name,
                line.line.quantity,
                line.line.unit_price,
                line.line.discount,
                line.rate,
                line.tax,
                line.gross,
            )
            for line in totals.lines
        ],
        totals.discounts(),
        OrderCharges(
            totals.prices_include_tax, country, totals.shipping and {**totals.shipping.as_json(), "country": country}
        ),
    )


def applied_voucher(discounts: list[dict]) -> int | None:
    """The voucher whose use an order counts (CartPrice.discounts): the one that took something off."""
    return next((each["promotion_id"] for each in discounts if each["code"] is not None), None)


@dataclass(frozen=True)
class OrderDraft:
    """What checkout decided: whose order, under which key, what, where to, and
    how long the shopper has to pay once it is written."""

    customer_id: int
    idempotency_key: str
    lines: list[PricedLine]
    currency: str
    shipping_address: dict | None
    payment_seconds: int
    client_address: str = ""  # whose unpaid holds the order counts in (orders/services/holds.py)
    discounts: list[dict] = field(default_factory=list)  # CartPrice.discounts
    charges: OrderCharges = field(default_factory=OrderCharges)

    @cached_property
    def total(self) -> int:
        """The lines' gross + shipping's (docs/architecture.md, "Totals")."""
        return sum(line.charged for line in self.lines) + self.charges.shipping_amount

    @cached_property
    def tax(self) -> int:
        return sum(line.tax for line in self.lines) + self.charges.shipping_tax

    @property
    def voucher_id(self) -> int | None:
        return applied_voucher(self.discounts)

    @cached_property
    def request_hash(self) -> str:
        """What the Idempotency-Key promises: the same key with another cart,
        price, discount, tax, shipping or address is refused (IdempotencyKeyReused).
        A line without a discount or tax hashes as before they existed."""
        lines = [
            (
                line.sku,
                line.quantity,
                line.unit_price,
                *([line.discount] * bool(line.discount or line.tax)),
                *([line.tax_rate, line.tax] * bool(line.tax)),
            )
            for line in self.lines
        ]
        address, shipping = self.shipping_address, self.charges.shipping
        canonical = [self.currency, lines, address] if address else [self.currency, lines]
        if shipping:
            canonical.append([shipping["code"], shipping["gross"], shipping["tax"]])
        canonical = json.dumps(canonical, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class BuiltOrder:
    """An order's values, ready for either path to write."""

    fields: dict  # Order field -> value (no id: the caller's)
    items: list[dict]  # OrderItem field -> value, per line (no order)
    draft: OrderDraft

    def event(self, order_id: int) -> NewEvent:
        """OrderCreated, or OrderRejected (with its reason) for a queued order the
        writer could not take."""
        data = {
            "order_id": order_id,
            "customer_id": self.draft.customer_id,
            "items": [
                {
                    "sku": li.sku,
                    "name": li.name,
                    "quantity": li.quantity,
                    "unit_price": li.unit_price,
                    "discount": li.discount,
                    "tax_rate": li.tax_rate,
                    "net": li.charged - li.tax,
                    "tax": li.tax,
                    "gross": li.charged,
                }
                for li in self.draft.lines
            ],
            "subtotal": sum(line.amount for line in self.draft.lines),
            "discounts": self.draft.discounts,
            "shipping": self.draft.charges.shipping,
            "prices_include_tax": self.draft.charges.prices_include_tax,
            "tax_country": self.draft.charges.tax_country,
            "tax": self.fields["tax_amount"],
            "tax_lines": tax_lines(
                ((item["tax_rate"], item["gross"] - item["tax"], item["tax"]) for item in self.items),
                self.draft.charges.shipping,
            ),
            "total": self.fields["total_amount"],
            "currency": self.draft.currency,
            "shipping_address": self.draft.shipping_address,
        }
        if self.fields["status"] == OrderStatus.REJECTED:
            return NewEvent("order", order_id, "OrderRejected", {**data, "reason": self.fields["rejection_reason"]})
        expires_at = self.fields["expires_at"].isoformat()
        return NewEvent("order", order_id, "OrderCreated", {**data, "expires_at": expires_at})


def build_order(
    draft: OrderDraft, *, now: datetime, request_hash: str | None = None, takes_holds: bool, rejection: str = ""
) -> BuiltOrder:
    """The order of `draft`, written at `now`: PENDING_PAYMENT until now +
    payment_seconds, or REJECTED for `rejection`. `request_hash` when the
    caller has it already (the queue carries it from checkout). `takes_holds`:
    whether the order's units count in its holders' unpaid holds (direct
    checkout; the queue's orders are bounded by the sale's gate instead)."""
    fields = {
        "customer_id": draft.customer_id,
        "idempotency_key": draft.idempotency_key,
        "request_hash": request_hash or draft.request_hash,
        "status": OrderStatus.REJECTED if rejection else OrderStatus.PENDING_PAYMENT,
        "total_amount": draft.total,
        "currency": draft.currency,
        "created_at": now,
        "expires_at": now + timedelta(seconds=draft.payment_seconds),
        "rejection_reason": rejection,
        "shipping_address": draft.shipping_address,
        "hold_address": draft.client_address,
        "holds_units": takes_holds and not rejection,
        "discounts": draft.discounts,
        "prices_include_tax": draft.charges.prices_include_tax,
        "tax_country": draft.charges.tax_country,
        "tax_amount": draft.tax,
        "shipping_amount": draft.charges.shipping_amount,
        "shipping": draft.charges.shipping,
    }
    items = [
        {
            "product_id": line.sku,
            "name": line.name,
            "quantity": line.quantity,
            "unit_price": line.unit_price,
            "discount": line.discount,
            "tax_rate": line.tax_rate,
            "tax": line.tax,
            "gross": line.charged,
        }
        for line in draft.lines
    ]
    return BuiltOrder(fields, items, draft)
