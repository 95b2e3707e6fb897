"""The orders admin, by subject; importing the modules registers their ModelAdmins."""

from orders.admin import orders, payments, returns  # noqa: F401
