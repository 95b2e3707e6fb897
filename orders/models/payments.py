"""Where an order's money is: payments, the provider's sessions, refunds."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.money import format_money


class PaymentStatus(models.TextChoices):
    """Where a payment's money is (orders/transitions.py PAYMENT_TRANSITIONS moves it):
    AUTHORIZED (held on the card), then CAPTURED (taken), VOIDED (released) or
    LAPSED (the hold ended before a capture);
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
    # The authorization ended before the shop captured it: nothing was taken.
    LAPSED = "lapsed", "Authorization lapsed"


class PaymentOutcome(models.TextChoices):
    APPLIED = "applied", "Paid the order"
    REFUNDED = "refunded", "Not applied, refunded"
    VOIDED = "voided", "Not applied, voided"
    FAILED = "failed", "Payment failed"
    # It paid the order until its authorization lapsed: the order may be paid again.
    LAPSED = "lapsed", "Paid the order, then lapsed"


class RefundReason(models.TextChoices):
    ORDER_NOT_PENDING = "order_not_pending", "Order was no longer awaiting payment"
    AMOUNT_MISMATCH = "amount_mismatch", "Amount or currency did not match the order"
    UNKNOWN_ORDER = "unknown_order", "No such order"
    STAFF = "staff", "Refunded by staff"
    RETURN = "return", "Returned items received"
    GOODWILL = "goodwill", "Goodwill refund by staff"
    LINES_CANCELLED = "lines_cancelled", "Lines removed before shipping"
    EXCESS_CAPTURE = "excess_capture", "Captured beyond what the order costs"


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
    order = models.ForeignKey("orders.Order", null=True, blank=True, on_delete=models.PROTECT, related_name="payments")
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
    # When the money held ends if not captured (PAYMENT_AUTHORIZATION_DAYS after the
    # authorization): a paid order not shipped is captured a day before
    # (orders/services/authorizations.py). Null for a payment that never held money.
    authorization_ends_at = models.DateTimeField(null=True, blank=True)
    # When order managers were told it ends soon (once per payment).
    authorization_warned_at = models.DateTimeField(null=True, blank=True)
    # The signed body exactly as received, as text: jsonb cannot hold a \u0000 escape
    # and a provider may put one in any field, which must not cost us the payment.
    raw_body = models.TextField()

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=PaymentStatus.values), name="payment_status_valid"),
            models.CheckConstraint(condition=Q(outcome__in=PaymentOutcome.values), name="payment_outcome_valid"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="payment_amount_not_negative"),
            # An order is paid by one payment at most (orders/money.py): any other paid nothing.
            models.UniqueConstraint(
                fields=["order"], condition=Q(outcome=PaymentOutcome.APPLIED), name="payment_one_applied_per_order"
            ),
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
                condition=Q(authorized_at__isnull=True, authorization_ends_at__isnull=True)
                | Q(authorized_at__isnull=False, authorization_ends_at__gt=F("authorized_at")),
                name="payment_authorization_ends_after_it_starts",
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
        indexes = [
            # The money held now, by when it ends (orders/services/authorizations.py, the dashboard).
            models.Index(
                fields=["authorization_ends_at"],
                condition=Q(status__in=[PaymentStatus.AUTHORIZED, PaymentStatus.CAPTURING])
                & Q(outcome=PaymentOutcome.APPLIED),
                name="payment_held_ends_at",
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

    order = models.ForeignKey("orders.Order", on_delete=models.CASCADE, related_name="payment_sessions", db_index=False)
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
    order = models.ForeignKey("orders.Order", null=True, blank=True, on_delete=models.PROTECT, related_name="refunds")
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
