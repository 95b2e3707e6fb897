from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, QuerySet, Sum

from inventory import gate
from inventory.models import FlashSale, Stock
from orders.models import Order, OrderItem, OrderStatus
from shop.totals import tax_lines


def customer_orders(*, customer_id: int, status: str | None = None) -> QuerySet[Order]:
    """Newest first (only those in `status` if given), items and refunds
    prefetched (three queries per page)."""
    orders = Order.objects.filter(customer_id=customer_id)
    if status:
        orders = orders.filter(status=status)
    return orders.order_by("-id").prefetch_related("items", "refunds")


def order_tax_lines(order: Order) -> list[dict]:
    """The order's tax per rate as charged now: its items' (less the units staff
    removed, the first ones: orders/services/refunds.py price_units) and
    shipping's; they add up to `tax_amount`. Items prefetched: no query."""
    parts = []
    for item in order.items.all():
        gross = item.gross - item.price_of_units(first=0, count=item.cancelled)
        tax = item.tax - item.tax_of_units(first=0, count=item.cancelled)
        parts.append((item.tax_rate, gross - tax, tax))
    return tax_lines(parts, order.shipping)


@dataclass(frozen=True)
class FlashSaleStatus:
    sku: str
    mode: str
    per_customer_limit: int | None
    gate_remaining: int | None
    available: int
    reserved: int
    units_ordered: int
    refused: int
    starts_at: datetime | None = None
    ends_at: datetime | None = None


def flash_sale_status(*, sku: str | None = None) -> list[FlashSaleStatus]:
    sales = FlashSale.objects.order_by("product_id")
    if sku:
        sales = sales.filter(product_id=sku)
    sales = list(sales)
    counters = gate.counters(skus=[s.product_id for s in sales])
    result = []
    for sale in sales:
        stock = Stock.objects.filter(product_id=sale.product_id).first()
        ordered = (
            OrderItem.objects.filter(product_id=sale.product_id, order__created_at__gte=sale.started_at)
            .exclude(order__status__in=[OrderStatus.CANCELLED, OrderStatus.REJECTED])  # never held, or gave back
            .aggregate(total=Sum(F("quantity") - F("cancelled")))["total"]
        )
        result.append(
            FlashSaleStatus(
                sku=sale.product_id,
                mode=sale.mode,
                per_customer_limit=sale.per_customer_limit,
                gate_remaining=counters[sale.product_id]["remaining"],
                available=stock.available if stock else 0,
                reserved=stock.reserved if stock else 0,
                units_ordered=ordered or 0,
                refused=counters[sale.product_id]["refused"],
                starts_at=sale.starts_at,
                ends_at=sale.ends_at,
            )
        )
    return result
