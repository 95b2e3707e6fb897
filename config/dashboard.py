"""The staff dashboard and the live flash-sale page (config/admin.py serves them):
figures from every app, so they live in the wiring layer. Each is a fixed
number of queries whatever the number of orders (tests/config/test_dashboard.py)."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from core.money import format_money
from inventory import gate
from inventory.models import FlashSale
from orders.models import Order, OrderItem, OrderStatus, Refund, Return
from orders.queue_writer import WRITER_GROUP
from orders.selectors import flash_sale_status
from orders.services.authorizations import authorizations_ending
from orders.services.queue_admission import queue_depths, stale_queued
from outbox.lag import consumer_positions
from outbox.services import backlog
from shop.models import LoyaltyEntry

PAID = [OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.REFUNDED]  # orders whose money arrived


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    height: float
    center: float  # where its value is written, above it
    minute: str  # "12:05"
    value: int

    @property
    def label(self) -> str:
        return f"{self.minute}: {self.value} orders"


@dataclass(frozen=True)
class LoyaltyFigures:
    """Today's loyalty entries of one reason: how many, and the points they gave and took back."""

    label: str
    entries: int
    earned: int
    taken_back: int


@dataclass(frozen=True)
class Tick:
    at: float  # x or y in the plot, by axis
    label: str


def per_minute(orders, *, minutes: int, now) -> list[tuple]:
    """(minute, orders) for each of the last `minutes` minutes, oldest first, zeros included: one query."""
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    counted = dict(
        orders.filter(created_at__gte=start)
        .annotate(minute=TruncMinute("created_at"))
        .values_list("minute")
        .annotate(n=Count("id"))
        .values_list("minute", "n")
    )
    return [(start + timedelta(minutes=i), counted.get(start + timedelta(minutes=i), 0)) for i in range(minutes)]


def bars(series: list[tuple], *, width: int = 840, height: int = 120, every: int = 10) -> dict:
    """A bar chart of (time, value) as SVG geometry in a plot of width x height,
    drawn by the template on the server (no script: the CSP allows none inline):
    each bar with its value, a y axis ticked at 0, half and the top, an x axis
    labelled every `every` bars."""
    top = max([value for _, value in series] + [1])
    step = width / max(len(series), 1)

    def tall(value) -> float:
        return round(value * height / top, 1)

    shapes = [
        Bar(
            x=round(i * step, 1),
            y=round(height - tall(value), 1),
            height=tall(value),
            center=round((i + 0.4) * step, 1),
            minute=f"{moment:%H:%M}",
            value=value,
        )
        for i, (moment, value) in enumerate(series)
    ]
    return {
        "bars": shapes,
        "width": width,
        "height": height,
        "bar_width": round(step * 0.8, 1),
        "top": top,
        "y_ticks": [Tick(at=round(height - tall(value), 1), label=str(value)) for value in sorted({0, top // 2, top})],
        "x_ticks": [Tick(at=bar.center, label=bar.minute) for bar in shapes[::every]],
    }


def dashboard(*, now=None) -> dict:
    """Today's orders, revenue and paid rate; orders a minute over the last hour;
    the outbox backlog and the consumers' lag; refunds waiting or failed; returns
    awaiting a decision or their parcel; paid orders whose card authorization
    ends within a day, and those whose payment lapsed; today's loyalty entries,
    by reason. Eight queries, and Kafka for the lag."""
    now = now or timezone.now()
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    today = Order.objects.filter(created_at__gte=midnight).aggregate(
        orders=Count("id"),
        paid=Count("id", filter=Q(status__in=PAID)),
        revenue=Sum("total_amount", filter=Q(status__in=PAID), default=0),
    )
    outbox = backlog(now=now)
    refunds = dict(
        Refund.objects.exclude(status=Refund.Status.COMPLETED)
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    returns = dict(
        Return.objects.filter(status__in=[Return.Status.REQUESTED, Return.Status.APPROVED])
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    loyalty = [
        LoyaltyFigures(label=LoyaltyEntry.Reason(reason).label, entries=entries, earned=earned, taken_back=-taken)
        for reason, entries, earned, taken in LoyaltyEntry.objects.filter(created_at__gte=midnight)
        .values_list("reason")
        .order_by("reason")
        .annotate(
            n=Count("id"),
            earned=Sum("points", filter=Q(points__gt=0), default=0),
            taken=Sum("points", filter=Q(points__lt=0), default=0),
        )
        .values_list("reason", "n", "earned", "taken")
    ]
    return {
        "today": {
            **today,
            "paid_rate": today["paid"] / today["orders"] if today["orders"] else None,
            "revenue_shown": format_money(today["revenue"], settings.SHOP_CURRENCY),
        },
        "chart": bars(per_minute(Order.objects.all(), minutes=60, now=now)),
        "outbox_waiting": outbox.waiting,
        "outbox_oldest_age": outbox.oldest_age_seconds,
        "consumers": consumer_positions(extra={WRITER_GROUP: settings.KAFKA_CHECKOUT_TOPIC}, timeout=2.0),
        "refunds_waiting": refunds.get(Refund.Status.REQUESTED, 0) + refunds.get(Refund.Status.SUBMITTED, 0),
        "refunds_failed": refunds.get(Refund.Status.FAILED, 0),
        "authorizations_ending": authorizations_ending(now=now).count(),
        "payments_lapsed": Order.objects.filter(status=OrderStatus.PAYMENT_LAPSED).count(),
        "returns_requested": returns.get(Return.Status.REQUESTED, 0),
        "returns_approved": returns.get(Return.Status.APPROVED, 0),
        "loyalty_today": {
            "entries": sum(each.entries for each in loyalty),
            "earned": sum(each.earned for each in loyalty),
            "taken_back": sum(each.taken_back for each in loyalty),
            "by_reason": loyalty,
        },
    }


def _span(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{minutes} min"] * bool(minutes)
    return " ".join(parts + [f"{seconds} s"]) if not days else " ".join(parts)


def sale_window(starts_at, ends_at, now) -> str:
    """Where the sale stands in its window, as a countdown for the live page."""
    if now < starts_at:
        return f"opens in {_span((starts_at - now).total_seconds())}"
    if ends_at is None:
        return "open, no end"
    if now < ends_at:
        return f"open, ends in {_span((ends_at - now).total_seconds())}"
    return f"ended {_span((now - ends_at).total_seconds())} ago"


def live_flash_sale(*, sku: str, now=None) -> dict | None:
    """A sale as it runs: units left at the gate and in the database, orders a
    minute, refusals, the queue's depth in queue mode. None when no such sale."""
    now = now or timezone.now()
    [sale] = flash_sale_status(sku=sku) or [None]
    if sale is None:
        return None
    orders = Order.objects.filter(id__in=OrderItem.objects.filter(product_id=sku).values("order_id"))
    series = per_minute(orders, minutes=15, now=now)
    last_minute = orders.filter(created_at__gt=now - timedelta(minutes=1)).count()  # 60 s, not the clock minute
    try:
        depth = queue_depths().get(sku, 0) if sale.mode == FlashSale.Mode.QUEUE else None
        stale = stale_queued().get(sku, 0) if sale.mode == FlashSale.Mode.QUEUE else None
        refusals = gate.counters(skus=[sku])[sku]["by_reason"]
    except Exception:  # Redis down: the rest still shows
        depth, stale, refusals = None, None, {}
    return {
        "sku": sku,
        "mode": sale.mode,
        "starts_at": sale.starts_at.isoformat(),
        "ends_at": sale.ends_at.isoformat() if sale.ends_at else None,
        "window": sale_window(sale.starts_at, sale.ends_at, now),
        "gate_remaining": sale.gate_remaining,
        "available": sale.available,
        "reserved": sale.reserved,
        "units_ordered": sale.units_ordered,
        "refused_sold_out": refusals.get("sold_out"),
        "refused_limit_reached": refusals.get("limit_reached"),
        "refused_rate_limited": refusals.get("rate_limited"),
        "orders_last_minute": last_minute,
        "per_minute": [{"minute": f"{moment:%H:%M}", "orders": n} for moment, n in series],
        "queue_depth": depth,
        "queue_stale": stale,
        "at": now.isoformat(),
    }
