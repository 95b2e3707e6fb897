"""The orders admin, by subject; importing the modules registers their ModelAdmins."""

from orders.admin import accounts, orders, payments, returns  # noqa: F401
