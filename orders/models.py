from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.money import format_money
from shop.models import ADDRESS_FIELDS


class OrderStatus(models.TextChoices):
    PENDING_PAYMENT = "PENDING_PAYMENT", "Pending payment"
    PAID = "PAID", "Paid"
    SHIPPED = "SHIPPED", "Shipped"
    CANCELLED = "CANCELLED", "Cancelled"
    REFUNDED = "REFUNDED", "Refunded"
    # A queue-mode checkout the database could not take (the gate drifted, the
    # product went inactive): written so that the shopper sees why.
    REJECTED = "REJECTED", "Rejected"


class OrderQuerySet(models.QuerySet):
    def pending_expired(self, now):
        return self.filter(status=OrderStatus.PENDING_PAYMENT, expires_at__lte=now)


class Order(models.Model):
    # No index of its own: order_customer_newest and the key's unique index both lead with it,
    # and each index is written on every order (bench/queue.py part 1).
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders", db_index=False
    )
    idempotency_key = models.CharField(max_length=64)
    # sha256 of the priced cart the key was first used with: a different cart
    # under the same key is refused rather than silently answered with this order.
    request_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=OrderStatus.choices, default=OrderStatus.PENDING_PAYMENT)
    total_amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField()
    paid_at = models.DateTimeField(null=True, blank=True)
    shipped_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # Where it goes, as it was at checkout (editing the saved address later changes
    # no order). Null only on orders placed before addresses existed.
    shipping_address = models.JSONField(null=True, blank=True)
    # The client address checkout saw, and whether the order holds units in
    # UnpaidHold (direct checkouts do; queued ones are bounded by the sale's gate).
    hold_address = models.CharField(max_length=64, blank=True, default="", db_default="")
    holds_units = models.BooleanField(default=False, db_default=False)
    rejection_reason = models.CharField(max_length=40, blank=True, default="", db_default="")  # REJECTED: why
    # The promotions that took something off, as checkout priced the order:
    # [{"promotion_id", "name", "code" (a voucher's; null), "amount"}]; total_amount is after them.
    discounts = models.JSONField(default=list, db_default=[], blank=True)

    objects = OrderQuerySet.as_manager()

    class Meta:
        db_table = "orders"
        ordering = ["-id"]
        permissions = [("export_order", "Can export orders as CSV")]
        constraints = [
            models.UniqueConstraint(fields=["customer", "idempotency_key"], name="order_idempotency_key_unique"),
            models.CheckConstraint(condition=Q(status__in=OrderStatus.values), name="order_status_valid"),
            models.CheckConstraint(condition=Q(total_amount__gte=0), name="order_total_not_negative"),
            models.CheckConstraint(condition=~Q(idempotency_key=""), name="order_idempotency_key_not_empty"),
            models.CheckConstraint(
                condition=Q(status=OrderStatus.REJECTED) | Q(rejection_reason=""),
                name="order_rejection_reason_only_rejected",
            ),
            models.CheckConstraint(
                condition=Q(shipping_address__isnull=True) | Q(shipping_address__has_keys=list(ADDRESS_FIELDS)),
                name="order_shipping_address_complete",
            ),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=Q(status=OrderStatus.PENDING_PAYMENT),
                name="order_pending_expires_at",
            ),
            models.Index(fields=["customer", "-id"], name="order_customer_newest"),
        ]

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"


class PendingOrderCount(models.Model):
    """How many orders a customer has awaiting payment, so that one account cannot
    hoard stock with unpaid orders. Checkout takes a slot with a conditional UPDATE
    in the transaction that inserts the order (refused at
    MAX_PENDING_ORDERS_PER_CUSTOMER; orders/services/slots.py); payment
    and cancellation give it back in the statements that move the order."""

    customer = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    pending = models.IntegerField()

    class Meta:
        db_table = "order_pending_counts"
        constraints = [models.CheckConstraint(condition=Q(pending__gte=0), name="pending_order_count_not_negative")]

    def __str__(self) -> str:
        return f"customer {self.customer_id}: {self.pending} pending"


class UnpaidHold(models.Model):
    """Units of one SKU that unpaid orders hold, per holder: a customer
    ("customer:42") or a client address ("address:192.0.2.1"), so that neither
    one account nor many accounts from one address can keep a product off sale.
    Checkout adds an order's units within the holder's cap (orders/services/holds.py);
    the order leaving PENDING_PAYMENT takes them off."""

    holder = models.CharField(max_length=80)
    product = models.ForeignKey("shop.Product", on_delete=models.CASCADE, db_column="sku", related_name="+")
    units = models.IntegerField()
    cap = models.IntegerField()  # the cap in force when units last grew

    class Meta:
        db_table = "order_unpaid_holds"
        constraints = [
            models.UniqueConstraint(fields=["holder", "product"], name="unpaid_hold_unique"),
            models.CheckConstraint(condition=Q(units__gte=0), name="unpaid_hold_not_negative"),
            models.CheckConstraint(condition=Q(units__lte=F("cap")), name="unpaid_hold_within_cap"),
        ]

    def __str__(self) -> str:
        return f"{self.holder} holds {self.units} x {self.product_id}"


class QueuedOrderAlias(models.Model):
    """An id a queue checkout answered 202 with, for an Idempotency-Key whose
    order the writer found written under another id (Redis had forgotten the
    key and the shopper retried): that id leads to the written order."""

    queued_id = models.BigIntegerField(primary_key=True)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="+")

    class Meta:
        db_table = "order_queued_aliases"
        constraints = [models.CheckConstraint(condition=~Q(queued_id=F("order")), name="queued_alias_not_itself")]

    def __str__(self) -> str:
        return f"{self.queued_id} -> order {self.order_id}"


class OrderItem(models.Model):
    # Indexed by order_item_sku_unique (order, sku) and order_item_sku: without the indexes Django
    # adds to foreign keys, one on the order already covered and a LIKE index on the SKU no query
    # uses (the admin's search is case-insensitive), each written on every line.
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items", db_index=False)
    product = models.ForeignKey(
        "shop.Product", on_delete=models.PROTECT, db_column="sku", related_name="+", db_index=False
    )
    name = models.CharField(max_length=200)
    quantity = models.IntegerField()
    unit_price = models.BigIntegerField()  # the catalog price when the order was placed
    discount = models.BigIntegerField(default=0, db_default=0)  # minor units off the whole line (promotions)
    # What became of the units since, each count grown by a conditional UPDATE under
    # these CHECKs (orders/services/returns.py, orders/services/amendments.py):
    cancelled = models.IntegerField(default=0, db_default=0)  # removed by staff before shipping
    in_returns = models.IntegerField(default=0, db_default=0)  # claimed by returns not rejected
    returned = models.IntegerField(default=0, db_default=0)  # of those, received back
    refunded = models.IntegerField(default=0, db_default=0)  # whose price went back to the shopper

    class Meta:
        db_table = "order_items"
        ordering = ["product_id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "product"], name="order_item_sku_unique"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="order_item_quantity_positive"),
            models.CheckConstraint(condition=Q(unit_price__gte=0), name="order_item_price_not_negative"),
            models.CheckConstraint(
                condition=Q(discount__gte=0) & Q(discount__lte=F("quantity") * F("unit_price")),
                name="order_item_discount_within_line",
            ),
            models.CheckConstraint(
                condition=Q(cancelled__gte=0)
                & Q(in_returns__gte=0)
                & Q(in_returns__lte=F("quantity") - F("cancelled")),
                name="order_item_returns_within_shipped",
            ),
            models.CheckConstraint(
                condition=Q(returned__gte=0) & Q(returned__lte=F("in_returns")),
                name="order_item_returned_within_returns",
            ),
            models.CheckConstraint(
                condition=Q(refunded__gte=0) & Q(refunded__lte=F("quantity") - F("cancelled")),
                name="order_item_refunded_within_line",
            ),
        ]
        indexes = [models.Index(fields=["product"], name="order_item_sku")]  # a product's lines (PROTECT)

    def __str__(self) -> str:
        return f"{self.quantity} x {self.product_id}"

    @property
    def line_total(self) -> int:
        """What the line costs after its discount."""
        return self.quantity * self.unit_price - self.discount

    @property
    def shipped_units(self) -> int:
        return self.quantity - self.cancelled

    def price_of_units(self, *, first: int, count: int) -> int:
        """What units [first, first + count) of the line cost after its discount,
        in minor units. The discount is spread over the units with integer
        division, the share of the first m units rounded down: a part of the
        line gives back at most a minor unit more than its exact share, and the
        units that complete the line make up for it, so every unit of the line
        together costs exactly `line_total`."""
        return self._paid_for(first + count) - self._paid_for(first)

    def _paid_for(self, units: int) -> int:
        return units * self.unit_price - self.discount * units // self.quantity


class PaymentStatus(models.TextChoices):
    """Where a payment's money is (orders/transitions.py PAYMENT_TRANSITIONS moves it):
    AUTHORIZED (held on the card), then CAPTURED (taken) or VOIDED (released);
    CAPTURING and VOIDING are the shop's claim on one of the two while the
    provider is asked (the claim decides a capture racing a void); REFUNDED once a
    refund of it completes; FAILED never held anything."""

    AUTHORIZED = "authorized", "Authorized"
    CAPTURING = "capturing", "Capture requested"
    CAPTURED = "captured", "Captured"
    VOIDING = "voiding", "Void requested"
    VOIDED = "voided", "Voided"
    REFUNDED = "refunded", "Refunded"
    FAILED = "failed", "Failed"


class PaymentOutcome(models.TextChoices):
    APPLIED = "applied", "Paid the order"
    REFUNDED = "refunded", "Not applied, refunded"
    VOIDED = "voided", "Not applied, voided"
    FAILED = "failed", "Payment failed"


class RefundReason(models.TextChoices):
    ORDER_NOT_PENDING = "order_not_pending", "Order was no longer awaiting payment"
    AMOUNT_MISMATCH = "amount_mismatch", "Amount or currency did not match the order"
    UNKNOWN_ORDER = "unknown_order", "No such order"
    STAFF = "staff", "Refunded by staff"
    RETURN = "return", "Returned items received"
    GOODWILL = "goodwill", "Goodwill refund by staff"
    LINES_CANCELLED = "lines_cancelled", "Lines removed before shipping"


class RefundStatus(models.TextChoices):
    REQUESTED = "REQUESTED", "Requested"
    SUBMITTED = "SUBMITTED", "Submitted to the provider"
    COMPLETED = "COMPLETED", "Completed"
    FAILED = "FAILED", "Failed"


CAPTURED_STATUSES = [PaymentStatus.CAPTURED, PaymentStatus.REFUNDED]  # the money was taken


class Payment(models.Model):
    """A payment the provider told us of, whatever it says, and where its money
    is since. `provider_payment_id` is unique: a redelivered webhook finds its
    payment and changes nothing; its status moves only by conditional updates
    (orders/transitions.py PAYMENT_TRANSITIONS), each stamped."""

    Status = PaymentStatus
    Outcome = PaymentOutcome

    provider_payment_id = models.CharField(max_length=100, unique=True)
    # Null for an orphan payment (unknown order); the order id it named is in `raw_body`.
    order = models.ForeignKey(Order, null=True, blank=True, on_delete=models.PROTECT, related_name="payments")
    amount = models.BigIntegerField()  # authorized
    currency = models.CharField(max_length=3)
    # Taken at capture (less than `amount` when staff removed lines before: the rest
    # is released), and what refunds not failed claim of it: it grows by one
    # conditional UPDATE under payment_refunds_within_captured (orders/services/refunds.py).
    captured_amount = models.BigIntegerField(default=0, db_default=0)
    refunded_amount = models.BigIntegerField(default=0, db_default=0)
    status = models.CharField(max_length=10, choices=Status.choices)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    received_at = models.DateTimeField()
    authorized_at = models.DateTimeField(null=True, blank=True)
    captured_at = models.DateTimeField(null=True, blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)
    # The signed body exactly as received, as text: jsonb cannot hold a \u0000 escape
    # and a provider may put one in any field, which must not cost us the payment.
    raw_body = models.TextField()

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=PaymentStatus.values), name="payment_status_valid"),
            models.CheckConstraint(condition=Q(outcome__in=PaymentOutcome.values), name="payment_outcome_valid"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="payment_amount_not_negative"),
            models.CheckConstraint(
                condition=Q(refunded_amount__gte=0)
                & Q(refunded_amount__lte=F("captured_amount"))
                & Q(captured_amount__lte=F("amount")),
                name="payment_refunds_within_captured",
            ),
            # Each stamp is there exactly when the status says the money got there.
            models.CheckConstraint(
                condition=Q(status=PaymentStatus.FAILED, authorized_at__isnull=True)
                | (~Q(status=PaymentStatus.FAILED) & Q(authorized_at__isnull=False)),
                name="payment_authorized_at_unless_failed",
            ),
            models.CheckConstraint(
                condition=Q(status__in=CAPTURED_STATUSES, captured_at__isnull=False)
                | (~Q(status__in=CAPTURED_STATUSES) & Q(captured_at__isnull=True)),
                name="payment_captured_at_iff_captured",
            ),
            models.CheckConstraint(
                condition=Q(status=PaymentStatus.VOIDED, voided_at__isnull=False)
                | (~Q(status=PaymentStatus.VOIDED) & Q(voided_at__isnull=True)),
                name="payment_voided_at_iff_voided",
            ),
        ]

    def __str__(self) -> str:
        return f"payment {self.provider_payment_id} ({self.status}, {self.outcome})"


class PaymentSession(models.Model):
    """A payment the shop started for an order (POST /api/orders/{id}/payment):
    the provider's session and the page the shopper pays on. One attempt at a
    time per order: a repeated call finds the open one, and concurrent calls
    ask the provider under the same idempotency key (`session-{order}-{attempt}`),
    so they all get one session."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="payment_sessions", db_index=False)
    attempt = models.PositiveSmallIntegerField()
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    expires_at = models.DateTimeField()  # never past the order's payment deadline
    provider_session_id = models.CharField(max_length=100, blank=True, default="")  # "" until the provider answers
    pay_url = models.URLField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "attempt"], name="payment_session_attempt_unique"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="payment_session_amount_not_negative"),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="payment_session_attempt_positive"),
        ]

    def __str__(self) -> str:
        return f"payment session {self.provider_session_id or '(asking)'} of order {self.order_id}"

    @property
    def idempotency_key(self) -> str:
        return f"session-{self.order_id}-{self.attempt}"


class Refund(models.Model):
    """Money to give back, paid out through the payment provider: REQUESTED, then
    SUBMITTED once the provider took the call, then COMPLETED or FAILED when it
    confirms through the webhook (orders/services/refunds.py). A FAILED refund
    can be retried by staff: a new attempt, a new idempotency key."""

    Reason = RefundReason
    Status = RefundStatus

    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds")
    order = models.ForeignKey(Order, null=True, blank=True, on_delete=models.PROTECT, related_name="refunds")
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=20, choices=Reason.choices)
    note = models.CharField(max_length=200, blank=True, default="", db_default="")  # staff's words (goodwill)
    # The order's units it pays back: [{"sku", "quantity", "amount"}] (empty: an amount, not units).
    lines = models.JSONField(default=list, db_default=[], blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.REQUESTED)
    attempt = models.PositiveSmallIntegerField(default=1, db_default=1)  # part of the provider's idempotency key
    failure_reason = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="refund_amount_not_negative"),
            models.CheckConstraint(condition=Q(reason__in=RefundReason.values), name="refund_reason_valid"),
            models.CheckConstraint(condition=Q(status__in=RefundStatus.values), name="refund_status_valid"),
            models.CheckConstraint(
                condition=Q(status=RefundStatus.COMPLETED, completed_at__isnull=False)
                | (~Q(status=RefundStatus.COMPLETED) & Q(completed_at__isnull=True)),
                name="refund_completed_at_iff_completed",
            ),
            models.CheckConstraint(
                condition=(Q(status=RefundStatus.FAILED) & ~Q(failure_reason=""))
                | (~Q(status=RefundStatus.FAILED) & Q(failure_reason="")),
                name="refund_failure_reason_iff_failed",
            ),
        ]
        indexes = [
            models.Index(fields=["status"], condition=~Q(status=RefundStatus.COMPLETED), name="refund_open_by_status"),
        ]

    def __str__(self) -> str:
        return f"refund {self.pk} of {format_money(self.amount, self.currency)} ({self.reason}, {self.status})"

    @property
    def idempotency_key(self) -> str:
        """What the provider sees for this attempt: the same on every retry of the call."""
        return f"refund-{self.pk}-{self.attempt}"


class Notification(models.Model):
    """An email sent to a shopper about an order (the email consumer)."""

    class Kind(models.TextChoices):
        ORDER_CONFIRMED = "order_confirmed", "Order confirmed"
        ORDER_CANCELLED = "order_cancelled", "Order cancelled"
        REFUND_REQUESTED = "refund_requested", "Refund on its way"
        ORDER_SHIPPED = "order_shipped", "Order shipped"
        REFUND_COMPLETED = "refund_completed", "Refund completed"
        PAYMENT_RECEIPT = "payment_receipt", "Payment receipt"
        RETURN_DECIDED = "return_decided", "Return approved or rejected"
        RETURN_RECEIVED = "return_received", "Return received"
        LINES_CANCELLED = "lines_cancelled", "Lines removed from the order"

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="notifications")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    to = models.EmailField()
    subject = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.kind} to {self.to}"


class ReturnStatus(models.TextChoices):
    REQUESTED = "REQUESTED", "Requested"
    APPROVED = "APPROVED", "Approved"
    REJECTED = "REJECTED", "Rejected"
    RECEIVED = "RECEIVED", "Received"  # its units back, checked, and refunded


class ReturnCondition(models.TextChoices):
    """What staff found a returned line in when it arrived."""

    RESTOCK = "restock", "Back on sale"
    DAMAGED = "damaged", "Damaged: written off"


class Return(models.Model):
    """A shopper sending units of a shipped order back (orders/services/returns.py):
    REQUESTED, then APPROVED or REJECTED by staff, then RECEIVED line by line with
    a condition, which restocks or writes off the units and refunds them."""

    Status = ReturnStatus

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="returns")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.REQUESTED)
    reason = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    refund = models.OneToOneField(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="for_return"
    )  # what receiving it paid back (none when nothing could be: a free order)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=ReturnStatus.values), name="return_status_valid"),
            models.CheckConstraint(
                condition=Q(status=ReturnStatus.REQUESTED) | Q(decided_at__isnull=False), name="return_decided_at"
            ),
            models.CheckConstraint(
                condition=Q(status=ReturnStatus.RECEIVED, received_at__isnull=False)
                | (~Q(status=ReturnStatus.RECEIVED) & Q(received_at__isnull=True) & Q(refund__isnull=True)),
                name="return_received_at_iff_received",
            ),
        ]
        indexes = [models.Index(fields=["status"], condition=Q(status=ReturnStatus.REQUESTED), name="return_open")]

    def __str__(self) -> str:
        return f"return {self.pk} of order {self.order_id} ({self.status})"


class ReturnLine(models.Model):
    return_request = models.ForeignKey(Return, on_delete=models.CASCADE, related_name="lines", db_column="return_id")
    item = models.ForeignKey(OrderItem, on_delete=models.PROTECT, related_name="return_lines")
    quantity = models.IntegerField()
    condition = models.CharField(max_length=10, choices=ReturnCondition.choices, blank=True, default="")  # on receipt

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["return_request", "item"], name="return_line_item_unique"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="return_line_quantity_positive"),
            models.CheckConstraint(
                condition=Q(condition="") | Q(condition__in=ReturnCondition.values), name="return_line_condition_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.item_id}"
