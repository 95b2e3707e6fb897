from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.moments import iso_moment
from shop.promotions import create_voucher


def _per_customer(value: str) -> int | None:
    if value.lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise CommandError(f"--per-customer: a number of uses, or none: {value!r}") from None


class Command(BaseCommand):
    help = (
        "Create a voucher: --percent P off each unit, or --amount CENTS off each unit of --skus (with --skus) "
        "or off the cart (without); on --skus only, or the whole cart; or --free-shipping [P] off the shipping."
    )

    def add_arguments(self, parser):
        parser.add_argument("code", help="letters, digits and dashes, at most 32; any case (stored upper-cased)")
        discount = parser.add_mutually_exclusive_group(required=True)
        discount.add_argument("--percent", type=int, help="1-100, off each unit (rounded half up per unit)")
        discount.add_argument(
            "--amount", type=int, help="minor units: off each unit of --skus, or off the cart without --skus"
        )
        discount.add_argument(
            "--free-shipping",
            type=int,
            nargs="?",
            const=100,
            metavar="PERCENT",
            help="off the shipping (default 100: free shipping); the whole cart",
        )
        parser.add_argument("--skus", help="comma-separated SKUs the voucher applies to (default: the whole cart)")
        parser.add_argument("--min-subtotal", type=int, default=0, help="minor units the cart's subtotal must reach")
        parser.add_argument("--limit", type=int, help="redemptions in all (default: no limit)")
        parser.add_argument("--per-customer", default="1", help="redemptions per shopper, or none (default 1)")
        parser.add_argument("--starts-at", type=iso_moment, help="ISO 8601 (default: now)")
        parser.add_argument("--ends-at", type=iso_moment, help="ISO 8601 (default: open-ended)")

    def handle(self, *args, code, percent, amount, free_shipping, skus, min_subtotal, limit, per_customer, **options):
        starts_at, ends_at = options["starts_at"], options["ends_at"]
        sku_list = [sku.strip() for sku in (skus or "").split(",") if sku.strip()]
        if skus is not None and not sku_list:
            raise CommandError("--skus: list at least one SKU")
        try:
            voucher = create_voucher(
                code=code,
                percent=percent,
                amount=amount,
                shipping_percent=free_shipping,
                skus=sku_list,
                min_subtotal=min_subtotal,
                usage_limit=limit,
                per_customer_limit=_per_customer(per_customer),
                starts_at=starts_at,
                ends_at=ends_at,
            )
        except ValidationError as error:
            raise CommandError(_messages(error)) from None
        on = ", ".join(sku_list) if sku_list else "the whole cart"
        ends = voucher.ends_at.isoformat() if voucher.ends_at else "open-ended"
        self.stdout.write(
            f"{voucher.code}: voucher {voucher.pk} created, {voucher.discount_label} on {on}; "
            f"limit {voucher.usage_limit or 'none'}, per customer {voucher.per_customer_limit or 'none'}; "
            f"from {voucher.starts_at.isoformat()} to {ends}"
        )


_OPTIONS = {
    "value": "--percent/--amount",
    "code": "CODE",
    "products": "--skus",
    "min_subtotal": "--min-subtotal",
    "usage_limit": "--limit",
    "per_customer_limit": "--per-customer",
    "starts_at": "--starts-at",
    "ends_at": "--ends-at",
}


def _messages(error: ValidationError) -> str:
    """The service's complaints, named by the command's options."""
    if not hasattr(error, "error_dict"):
        return "; ".join(error.messages)
    return "; ".join(
        f"{_OPTIONS.get(field, field) if field != '__all__' else 'voucher'}: {' '.join(messages)}"
        for field, messages in error.message_dict.items()
    )
