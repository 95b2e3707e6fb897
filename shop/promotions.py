"""Promotions and vouchers: staff create and end them (the admin,
`manage.py create_voucher`); the cart and checkout find a voucher by its code;
checkout counts its use in the order's own transaction, and the transaction
that cancels or expires the order gives it back.

A voucher's limits hold whatever the number of concurrent checkouts: its `uses`
grows by one conditional UPDATE (`uses < usage_limit`) backed by
`CHECK (uses <= usage_limit)`, and each shopper's count the same way in
VoucherCustomerUse (`uses < cap`, `CHECK (uses <= cap)`). The UPDATE also locks
the voucher's row until the order's transaction ends, so concurrent redemptions
of one voucher queue there, and each sees the count the previous one committed.
How a voucher prices a cart: shop/pricing.py.
"""

import re
from collections.abc import Iterable, Mapping
from datetime import datetime

from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, IntegerField, OuterRef, Q, Subquery, Value
from django.utils import timezone

from core.hotcache import bump_generation_on_commit
from shop.exceptions import VoucherExpired, VoucherNotApplicable, VoucherNotStarted, VoucherUnknown, VoucherUsedUp
from shop.models import (
    VOUCHER_CODE_PATTERN,
    DiscountKind,
    Product,
    Promotion,
    PromotionScope,
    VoucherCustomerUse,
    VoucherRedemption,
)
from shop.pricing import Priced, PromotionRule
from shop.selectors import RULE_FIELDS, promotion_rule


def normalize_code(code: str) -> str:
    """Codes are case-insensitive: stored and looked up upper-cased."""
    return code.strip().upper()


# --- staff: create, edit, end ------------------------------------------------------------------


@transaction.atomic
def create_promotion(
    *,
    name: str,
    kind: str,
    value: int,
    scope: str,
    skus: Iterable[str] = (),
    min_subtotal: int = 0,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    code: str | None = None,
    usage_limit: int | None = None,
    per_customer_limit: int | None = None,
) -> Promotion:
    """A new promotion (a voucher when `code` is given), checked as the admin
    checks it: ValidationError, with the fields, and nothing saved, when a value,
    a SKU or the code is not acceptable. The caches' generation moves (signals)."""
    skus = sorted(set(skus))
    promotion = Promotion(
        name=name,
        kind=kind,
        value=value,
        scope=scope,
        min_subtotal=min_subtotal,
        starts_at=starts_at or timezone.now(),
        ends_at=ends_at,
        code=normalize_code(code) if code else None,
        usage_limit=usage_limit,
        per_customer_limit=per_customer_limit,
    )
    promotion.full_clean()  # fields, the table's CHECKs, the code's uniqueness
    if unknown := sorted(set(skus) - set(Product.objects.filter(sku__in=skus).values_list("sku", flat=True))):
        raise ValidationError({"products": f"No such SKU: {', '.join(unknown)}"})
    if scope == PromotionScope.SKUS and not skus:
        raise ValidationError({"products": "List the SKUs the promotion applies to."})
    promotion.save()
    if scope == PromotionScope.SKUS:
        promotion.products.set(skus)
    return promotion


# What a form may write: `uses` belongs to the redemption services, and saving a
# promotion read a moment ago must not put back a count that has grown since.
EDITABLE_FIELDS = (
    "name", "kind", "value", "scope", "min_subtotal", "starts_at", "ends_at", "code", "usage_limit",
    "per_customer_limit", "updated_at",
)  # fmt: skip


def save_promotion(*, promotion: Promotion, changed: Iterable[str] | None = None) -> Promotion:
    """Save a promotion staff edited (the admin's form), never its `uses`; of an
    existing one only the fields in `changed` (default: all it may edit), so
    that a form opened before another change (the promotion ended meanwhile)
    does not put the old values back."""
    if promotion.pk is None:
        promotion.save()
    else:
        fields = [name for name in EDITABLE_FIELDS if changed is None or name in changed]
        promotion.save(update_fields=[*fields, "updated_at"] if "updated_at" not in fields else fields)
    return promotion


@transaction.atomic
def end_promotions(*, promotion_ids: Iterable[int], now: datetime | None = None) -> int:
    """End, at `now`, those of the promotions that have started and not ended;
    how many. One not started yet cannot end before it starts (CHECK ends_at >
    starts_at): delete it, or move its window, instead. The caches hear of it
    (an UPDATE sends no signal)."""
    now = now or timezone.now()
    ended = (
        Promotion.objects.filter(pk__in=list(promotion_ids), starts_at__lt=now)
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=now))
        .update(ends_at=now, updated_at=now)
    )
    if ended:
        bump_generation_on_commit()
    return ended


# --- shoppers: find a voucher, count its use, give it back --------------------------------------


def find_voucher(
    code: str, *, now: datetime, customer_id: int | None, lines: Mapping[str, int], products: Mapping[str, Priced]
) -> PromotionRule:
    """The voucher `code` names, if the cart `lines` (priced by `products`, at
    catalog prices) may use it at `now`; else VoucherUnknown, VoucherNotStarted,
    VoucherExpired, VoucherUsedUp (its usage limit reached, or this shopper's:
    `customer_id` None for a guest, whose count checkout makes), or
    VoucherNotApplicable (no SKU of it in the cart, or the subtotal below its
    minimum), each a 422. One query. The use is counted at checkout
    (redeem_voucher), which a concurrent checkout may have beaten."""
    code = normalize_code(code)
    if not re.fullmatch(VOUCHER_CODE_PATTERN, code):
        raise VoucherUnknown(voucher=code[:32])  # no query for what cannot be a code
    through = Promotion.products.through.objects.filter(promotion=OuterRef("pk")).values("product_id")
    shopper_uses = (
        Subquery(VoucherCustomerUse.objects.filter(voucher=OuterRef("pk"), customer_id=customer_id).values("uses"))
        if customer_id is not None
        else Value(None, output_field=IntegerField())
    )
    row = (
        Promotion.objects.filter(code=code)
        .annotate(sku_list=ArraySubquery(through), shopper_uses=shopper_uses)
        .values_list(*RULE_FIELDS, "uses", "sku_list", "shopper_uses", named=True)
        .first()
    )
    if row is None:
        raise VoucherUnknown(voucher=code)
    if now < row.starts_at:
        raise VoucherNotStarted(voucher=code, starts_at=row.starts_at.isoformat())
    if row.ends_at is not None and row.ends_at <= now:
        raise VoucherExpired(voucher=code, ended_at=row.ends_at.isoformat())
    if row.usage_limit is not None and row.uses >= row.usage_limit:
        raise VoucherUsedUp(voucher=code)
    if row.per_customer_limit is not None and (row.shopper_uses or 0) >= row.per_customer_limit:
        raise VoucherUsedUp("You have used that voucher as many times as you can.", voucher=code)
    voucher = promotion_rule(row, row.sku_list)
    subtotal = sum(quantity * products[sku].price for sku, quantity in lines.items())
    if subtotal < voucher.min_subtotal:
        raise VoucherNotApplicable(
            "The cart's subtotal is below the voucher's minimum.",
            voucher=code, min_subtotal=voucher.min_subtotal, subtotal=subtotal,
        )  # fmt: skip
    if not voucher.applies_to(lines, subtotal):
        raise VoucherNotApplicable("None of the voucher's products is in the cart.", voucher=code)
    return voucher


@transaction.atomic(savepoint=False)
def redeem_voucher(*, voucher_id: int, customer_id: int, order_id: int) -> VoucherRedemption:
    """Count one use of the voucher by this order, in the caller's transaction
    (the order's): the voucher's `uses` by one conditional UPDATE, a redemption
    row, then the shopper's count by another. VoucherUsedUp when either limit is
    reached; the caller's transaction then rolls back as a whole (no savepoint:
    nothing of the order stays). A per-customer limit set after a shopper's
    earlier redemptions counts from then on."""
    counted = (
        Promotion.objects.filter(pk=voucher_id, code__isnull=False)
        .filter(Q(usage_limit__isnull=True) | Q(uses__lt=F("usage_limit")))
        .update(uses=F("uses") + 1)
    )
    if not counted:
        raise VoucherUsedUp(voucher_id=voucher_id)
    # The row is ours until the transaction ends: its limit cannot change under us.
    limit = Promotion.objects.filter(pk=voucher_id).values_list("per_customer_limit", flat=True).get()
    redemption = VoucherRedemption.objects.create(
        voucher_id=voucher_id, customer_id=customer_id, order_id=order_id, customer_counted=limit is not None
    )
    if limit is not None:
        # The shopper's row, made at 0 if missing (ON CONFLICT DO NOTHING: no savepoint), then
        # counted only below the limit in force, which becomes its cap (as UnpaidHold's).
        VoucherCustomerUse.objects.bulk_create(
            [VoucherCustomerUse(voucher_id=voucher_id, customer_id=customer_id, uses=0, cap=limit)],
            ignore_conflicts=True,
        )
        counted = VoucherCustomerUse.objects.filter(
            voucher_id=voucher_id, customer_id=customer_id, uses__lt=limit
        ).update(uses=F("uses") + 1, cap=limit)
        if not counted:
            raise VoucherUsedUp("You have used that voucher as many times as you can.", voucher_id=voucher_id)
    return redemption


@transaction.atomic(savepoint=False)
def give_back_voucher(*, order_id: int) -> bool:
    """The order's voucher use given back, in the caller's transaction (the one
    cancelling or expiring the order): its redemption deleted and both counts
    decremented. Exactly once, however many callers race: the one whose DELETE
    removed the row gives back; the others find nothing. Whether this call did."""
    redemption = (
        VoucherRedemption.objects.filter(order_id=order_id)
        .values_list("pk", "voucher_id", "customer_id", "customer_counted")
        .first()
    )
    if redemption is None:
        return False
    pk, voucher_id, customer_id, customer_counted = redemption
    deleted, _ = VoucherRedemption.objects.filter(pk=pk).delete()
    if not deleted:
        return False  # a concurrent caller deleted it first (its DELETE made ours wait, then find nothing)
    Promotion.objects.filter(pk=voucher_id, uses__gt=0).update(uses=F("uses") - 1)
    if customer_counted:
        VoucherCustomerUse.objects.filter(voucher_id=voucher_id, customer_id=customer_id, uses__gt=0).update(
            uses=F("uses") - 1
        )
    return True


def create_voucher(
    *,
    code: str,
    percent: int | None = None,
    amount: int | None = None,
    skus: Iterable[str] = (),
    min_subtotal: int = 0,
    usage_limit: int | None = None,
    per_customer_limit: int | None = 1,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    name: str | None = None,
) -> Promotion:
    """A voucher, as `manage.py create_voucher` makes it: `percent` off each unit,
    or `amount` off each unit of `skus` (with SKUs) or off the cart (without);
    on `skus`, or the whole cart without them."""
    if (percent is None) == (amount is None):
        raise ValidationError("Give a percent or an amount, not both.")
    skus = list(skus)
    if percent is not None:
        kind, value = DiscountKind.PERCENT, percent
    else:
        kind, value = (DiscountKind.AMOUNT if skus else DiscountKind.CART_AMOUNT), amount
    return create_promotion(
        name=name or f"Voucher {normalize_code(code)}",
        kind=kind,
        value=value,
        scope=PromotionScope.SKUS if skus else PromotionScope.CART,
        skus=skus,
        min_subtotal=min_subtotal,
        starts_at=starts_at,
        ends_at=ends_at,
        code=code,
        usage_limit=usage_limit,
        per_customer_limit=per_customer_limit,
    )
