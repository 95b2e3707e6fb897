from django.db import models


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
        PAYMENT_REQUESTED = "payment_requested", "Asked to pay again"

    order = models.ForeignKey("orders.Order", on_delete=models.PROTECT, related_name="notifications")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    to = models.EmailField()
    subject = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.kind} to {self.to}"
