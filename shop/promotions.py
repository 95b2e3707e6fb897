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
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, IntegerField, OuterRef, Q, Subquery, Value
from django.utils import timezone

from core.db import execute_kept
from core.hotcache import bump_generation_on_commit
from core.locks import for_update
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
    "name",
    "kind",
    "value",
    "scope",
    "min_subtotal",
    "starts_at",
    "ends_at",
    "code",
    "usage_limit",
    "per_customer_limit",
    "updated_at",
)


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
    catalog prices) may use it at `now`: a code typed in (PUT /api/cart/voucher).
    Raises what check_voucher raises, and VoucherUsedUp (its usage limit
    reached, or this shopper's: `customer_id` None for a guest, whose count
    checkout makes). One query, always (it reads the uses). The use is counted
    at checkout (redeem_voucher), which a concurrent checkout may have beaten."""
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
    voucher = None if row is None else promotion_rule(row, row.sku_list)
    check_voucher(voucher, code, now=now, lines=lines, products=products)
    if row.usage_limit is not None and row.uses >= row.usage_limit:
        raise VoucherUsedUp(voucher=code)
    if row.per_customer_limit is not None and (row.shopper_uses or 0) >= row.per_customer_limit:
        raise VoucherUsedUp("You have used that voucher as many times as you can.", voucher=code)
    return voucher


def check_voucher(
    voucher: PromotionRule | None,
    code: str,
    *,
    now: datetime,
    lines: Mapping[str, int],
    products: Mapping[str, Priced],
) -> PromotionRule:
    """`voucher` (the rule `code` names, None: no such code) if the cart may use
    it at `now`, uses aside; else VoucherUnknown, VoucherNotStarted,
    VoucherExpired or VoucherNotApplicable (no SKU of it in the cart, or the
    subtotal below its minimum), each a 422. No query: for the cart view and
    checkout, with the rule from the hot cache (shop/selectors.py cached_voucher)."""
    if voucher is None:
        raise VoucherUnknown(voucher=code)
    if voucher.starts_at is not None and now < voucher.starts_at:
        raise VoucherNotStarted(voucher=code, starts_at=voucher.starts_at.isoformat())
    if voucher.ends_at is not None and voucher.ends_at <= now:
        raise VoucherExpired(voucher=code, ended_at=voucher.ends_at.isoformat())
    subtotal = sum(quantity * products[sku].price for sku, quantity in lines.items())
    if subtotal < voucher.min_subtotal:
        raise VoucherNotApplicable(
            "The cart's subtotal is below the voucher's minimum.",
            voucher=code,
            min_subtotal=voucher.min_subtotal,
            subtotal=subtotal,
        )
    if not lines:
        raise VoucherNotApplicable("The cart is empty: add what the voucher is for first.", voucher=code)
    if not voucher.applies_to(lines, subtotal):
        raise VoucherNotApplicable("None of the voucher's products is in the cart.", voucher=code)
    return voucher


# One statement for what was five (the voucher's count, its per-customer limit, the
# redemption row, the shopper's row made if missing, the shopper's count): a checkout
# with a voucher sends one statement more than one without (bench/checkout.py), not
# five. Each count grows only under its condition, as the ORM's F() updates did, and
# the CHECKs (uses <= usage_limit, uses <= cap) back both. The UPDATE locks the
# voucher's row until the order's transaction ends, so concurrent redemptions of one
# voucher queue there, each seeing the count the previous one committed. The cap of the
# shopper's row becomes the per-customer limit in force (as UnpaidHold's cap does).
REDEEM_SQL = f"""
WITH voucher AS (
    UPDATE {Promotion._meta.db_table} SET uses = uses + 1
    WHERE id = %s AND code IS NOT NULL AND (usage_limit IS NULL OR uses < usage_limit)
    RETURNING id, per_customer_limit
), shopper AS (
    INSERT INTO {VoucherCustomerUse._meta.db_table} AS mine (voucher_id, customer_id, uses, cap)
    SELECT id, %s, 1, per_customer_limit FROM voucher WHERE per_customer_limit IS NOT NULL
    ON CONFLICT (voucher_id, customer_id) DO UPDATE SET uses = mine.uses + 1, cap = EXCLUDED.cap
    WHERE mine.uses < EXCLUDED.cap
    RETURNING 1
), redemption AS (
    INSERT INTO {VoucherRedemption._meta.db_table} (voucher_id, customer_id, order_id, customer_counted, created_at)
    SELECT id, %s, %s, per_customer_limit IS NOT NULL, statement_timestamp() FROM voucher
    RETURNING 1
)
SELECT (SELECT count(*) FROM voucher), (SELECT count(*) FROM voucher WHERE per_customer_limit IS NULL)
     + (SELECT count(*) FROM shopper), (SELECT count(*) FROM redemption)
"""


@transaction.atomic(savepoint=False)  # on its own, the use would count without its order's rollback
def redeem_voucher(*, voucher_id: int, customer_id: int, order_id: int) -> None:
    """Count one use of the voucher by this order, in the caller's transaction
    (the order's), in one statement (REDEEM_SQL): the voucher's `uses`, the
    shopper's count when the voucher has a per-customer limit, a redemption
    row. VoucherUsedUp when either limit is reached; the caller's transaction
    then rolls back as a whole (nothing of the order stays). A per-customer
    limit set after a shopper's earlier redemptions counts from then on."""
    counted, shopper_counted, _ = execute_kept(REDEEM_SQL, [voucher_id, customer_id, customer_id, order_id]).fetchone()
    if not counted:
        raise VoucherUsedUp(voucher_id=voucher_id)
    if not shopper_counted:
        raise VoucherUsedUp("You have used that voucher as many times as you can.", voucher_id=voucher_id)


@transaction.atomic(savepoint=False)
def give_back_vouchers(*, order_ids: list[int]) -> int:
    """The orders' voucher uses given back, in the caller's transaction (the one
    cancelling or expiring them): their redemptions deleted, each voucher's
    `uses` and each shopper's count decremented by as many. Exactly once
    however many callers race; how many this call gave back. One query when
    none of the orders used a voucher."""
    # Locked: a concurrent caller waits here, then finds the rows deleted (exactly once).
    redemptions = list(
        for_update(VoucherRedemption.objects.filter(order_id__in=order_ids)).values_list(
            "pk", "voucher_id", "customer_id", "customer_counted"
        )
    )
    if not redemptions:
        return 0
    VoucherRedemption.objects.filter(pk__in=[pk for pk, *_ in redemptions]).delete()
    per_voucher = Counter(voucher_id for _, voucher_id, _, _ in redemptions)
    per_shopper = Counter((voucher_id, customer) for _, voucher_id, customer, counted in redemptions if counted)
    # Vouchers first, one at a time in id order, as every redemption locks them; then the shoppers' rows.
    for voucher_id, uses in sorted(per_voucher.items()):
        Promotion.objects.filter(pk=voucher_id).update(uses=F("uses") - uses)
    for (voucher_id, customer_id), uses in sorted(per_shopper.items()):
        VoucherCustomerUse.objects.filter(voucher_id=voucher_id, customer_id=customer_id).update(uses=F("uses") - uses)
    return len(redemptions)


class VoucherBatch:
    """The vouchers of a batch of orders written at once (the flash-sale queue's
    writer), under the rule redeem_voucher applies one order at a time: the
    vouchers' rows locked (in id order, as every redemption locks them), then
    each order's use taken while its voucher and its shopper have one left, in
    the order asked, and all written by save() in the same transaction. The
    CHECKs back the counts as they back redeem_voucher's."""

    def __init__(self, wanted: Iterable[tuple[int, int]]) -> None:
        """`wanted`: (voucher id, customer id) of the orders that may use one."""
        wanted = set(wanted)
        voucher_ids = sorted({voucher_id for voucher_id, _ in wanted})
        self._left: dict[int, int | None] = {}  # voucher id -> uses left (None: no limit)
        self._caps: dict[int, int | None] = {}  # voucher id -> per-customer limit
        for voucher_id, limit, uses, cap in for_update(
            Promotion.objects.filter(pk__in=voucher_ids, code__isnull=False)
        ).values_list("pk", "usage_limit", "uses", "per_customer_limit"):
            self._left[voucher_id] = None if limit is None else limit - uses
            self._caps[voucher_id] = cap
        self._shopper_uses: dict[tuple[int, int], int] = {}
        if self._left:
            pairs = Q()
            for voucher_id, customer_id in wanted:
                pairs |= Q(voucher_id=voucher_id, customer_id=customer_id)
            for voucher_id, customer_id, uses in VoucherCustomerUse.objects.filter(pairs).values_list(
                "voucher_id", "customer_id", "uses"
            ):
                self._shopper_uses[voucher_id, customer_id] = uses
        self._taken: list[tuple[int, int, int]] = []  # (order id, voucher id, customer id)

    def take(self, *, order_id: int, voucher_id: int, customer_id: int) -> bool:
        """Count the order's use if the voucher and the shopper have one left."""
        if voucher_id not in self._left or self._left[voucher_id] == 0:
            return False
        cap = self._caps[voucher_id]
        if cap is not None and self._shopper_uses.get((voucher_id, customer_id), 0) >= cap:
            return False
        if self._left[voucher_id] is not None:
            self._left[voucher_id] -= 1
        if cap is not None:
            self._shopper_uses[voucher_id, customer_id] = self._shopper_uses.get((voucher_id, customer_id), 0) + 1
        self._taken.append((order_id, voucher_id, customer_id))
        return True

    def save(self) -> None:
        """The uses taken, written: each voucher's count, the shoppers' counts, a
        redemption per order."""
        if not self._taken:
            return
        for voucher_id, uses in sorted(Counter(voucher_id for _, voucher_id, _ in self._taken).items()):
            Promotion.objects.filter(pk=voucher_id).update(uses=F("uses") + uses)
        counted = {(v, c) for _, v, c in self._taken if self._caps[v] is not None}
        VoucherCustomerUse.objects.bulk_create(
            [
                VoucherCustomerUse(voucher_id=v, customer_id=c, uses=self._shopper_uses[v, c], cap=self._caps[v])
                for v, c in sorted(counted)
            ],
            update_conflicts=True,
            unique_fields=["voucher", "customer"],
            update_fields=["uses", "cap"],
        )
        VoucherRedemption.objects.bulk_create(
            [
                VoucherRedemption(voucher_id=v, customer_id=c, order_id=o, customer_counted=self._caps[v] is not None)
                for o, v, c in self._taken
            ]
        )


def create_voucher(
    *,
    code: str,
    percent: int | None = None,
    amount: int | None = None,
    shipping_percent: int | None = None,
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
    on `skus`, or the whole cart without them; or `shipping_percent` off the
    shipping (100: free shipping; the whole cart)."""
    if sum(given is not None for given in (percent, amount, shipping_percent)) != 1:
        raise ValidationError("Give one of a percent, an amount or a shipping percent.")
    skus = list(skus)
    if shipping_percent is not None:
        if skus:
            raise ValidationError("A shipping discount applies to the whole cart: no SKUs.")
        kind, value = DiscountKind.FREE_SHIPPING, shipping_percent
    elif percent is not None:
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
