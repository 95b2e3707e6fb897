from django.db.models import QuerySet

from orders.models import Order


def customer_orders(*, customer_id: int) -> QuerySet[Order]:
    """Newest first, items prefetched (two queries per page)."""
    return Order.objects.filter(customer_id=customer_id).order_by("-id").prefetch_related("items")
