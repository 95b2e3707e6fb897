"""inventory/services/flash_sales.py and its commands: a sale is opened (seeded), its
gate counter synced from the database when lost, and ended."""

import pytest
from django.core.management import call_command

from inventory import gate
from inventory.models import FlashSale, Stock
from inventory.services.flash_sales import gated_skus
from tests.helpers import checkout, fill_cart, shopper_client, wait_until
from tests.inventory.conftest import counter, seed

pytestmark = pytest.mark.django_db


def test_seed_flash_sale_sets_database_and_gate(capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_flash_sale", "HOT", "--stock", "7", "--price", "49999", "--per-customer-limit", "2")
    stock = Stock.objects.get(product_id="HOT")
    assert (stock.available, stock.reserved) == (7, 0)
    assert counter() == 7
    assert FlashSale.objects.get().per_customer_limit == 2
    assert "7 units" in capsys.readouterr().out
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_flash_sale", "HOT", "--stock", "3")  # re-seed: exactly 3, through the ledger
    assert Stock.objects.get(product_id="HOT").available == 3 and counter() == 3
    from inventory.services import stock_audit

    assert stock_audit(skus=["HOT"])[0]["difference"] == 0


def test_lost_counter_fails_closed_until_synced(redis, capsys):
    seed(stock=5)
    gate.connection().delete(gate.remaining_key("HOT"))  # Redis restarted without persistence
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper, key="k1").status_code == 503
    call_command("flash_sale_sync", "HOT")
    assert counter() == 5
    assert checkout(shopper, key="k2").status_code == 201
    call_command("flash_sale_status")
    out = capsys.readouterr().out
    assert "HOT" in out and "gate counter set to 5" in out


def test_end_flash_sale_removes_the_gate(redis, django_capture_on_commit_callbacks):
    seed(stock=5)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("end_flash_sale", "HOT")
    assert not FlashSale.objects.exists()
    assert gate.connection().get(gate.remaining_key("HOT")) is None
    assert gated_skus() == {}
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper).status_code == 201  # straight to the database


def test_ending_a_sale_leaves_no_key_or_counter_of_it_in_the_gate(redis, settings, django_capture_on_commit_callbacks):
    from inventory.services.flash_sales import end_flash_sale, seed_flash_sale
    from tests.helpers import refuse_every_way

    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="GONE-1", stock=2, price=100, name="Sale item", per_customer_limit=1)
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "checkout": "1/min"}
    assert refuse_every_way(redis, "GONE-1") == ["limit_reached", "ordered", "sold_out", "rate_limited"]
    assert gate.counters(skus=["GONE-1"])["GONE-1"]["by_reason"] == {
        "sold_out": 1,
        "limit_reached": 1,
        "rate_limited": 1,
    }
    with django_capture_on_commit_callbacks(execute=True):
        end_flash_sale(sku="GONE-1")
    assert list(redis.scan_iter(match="*GONE-1*")) == []
    assert [field for field in redis.hkeys(gate.REFUSALS_KEY) if b"GONE-1" in field] == []


def test_units_ordered_count_neither_cancelled_nor_rejected_orders(redis):
    from orders.models import OrderStatus
    from orders.selectors import flash_sale_status
    from shop.models import Product
    from tests.factories import OrderItemFactory

    seed(stock=5)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper, key="k1").status_code == 201
    product = Product.objects.get(pk="HOT")
    OrderItemFactory(product=product, quantity=2, order__status=OrderStatus.REJECTED)  # a queued order not taken
    OrderItemFactory(product=product, quantity=3, order__status=OrderStatus.CANCELLED)
    [sale] = flash_sale_status(sku="HOT")
    assert sale.units_ordered == 1


def test_a_scheduled_sale_opens_on_time_with_no_process_told(redis, django_capture_on_commit_callbacks):
    """The gate compares the window with Redis's clock: refused before the start,
    admitted after it, and nothing moved the cache generation in between."""
    from datetime import timedelta

    from django.utils import timezone

    from core.hotcache import hot_cache
    from inventory.services.flash_sales import seed_flash_sale

    opens = timezone.now() + timedelta(seconds=2)
    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="HOT", stock=5, price=999, starts_at=opens)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    early = checkout(shopper, key="k1")
    assert early.status_code == 409 and early.json()["error"]["code"] == "sale_not_started"
    assert timezone.now() < opens and counter() == 5  # refused before the start, nothing taken
    generation = hot_cache.ensure_generation()
    answers = []
    assert wait_until(lambda: answers.append(checkout(shopper, key="k1").status_code) or answers[-1] == 201, 10)
    assert timezone.now() >= opens and set(answers[:-1]) <= {409}
    assert counter() == 4 and hot_cache.ensure_generation() == generation


def test_a_sale_closes_on_time_and_takes_nothing_after(redis, django_capture_on_commit_callbacks):
    from datetime import timedelta

    from django.utils import timezone

    from inventory.services.flash_sales import seed_flash_sale

    ends = timezone.now() + timedelta(seconds=1.5)
    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="HOT", stock=5, price=999, ends_at=ends)
    first, late = shopper_client(), shopper_client()
    fill_cart(redis, first.user.id, {"HOT": 1})
    assert checkout(first).status_code == 201 and counter() == 4
    fill_cart(redis, late.user.id, {"HOT": 1})
    assert wait_until(lambda: timezone.now() >= ends, 5)  # the moment comes; nobody is told
    answer = checkout(late)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "sale_ended"
    assert counter() == 4 and Stock.objects.get(product_id="HOT").reserved == 1


def test_the_gate_on_its_own_redis_keeps_the_window_too(redis):
    """gate.admit (a gate on a Redis of its own): the same window, by the same clock."""
    from inventory.services.flash_sales import GateRule

    seed(stock=5)
    now_ms = int(gate.connection().time()[0]) * 1000
    later, earlier = now_ms + 60_000, now_ms - 60_000
    with pytest.raises(gate.SaleNotStarted):
        gate.admit(customer_id=1, idempotency_key="k", lines={"HOT": 1}, rules={"HOT": GateRule(0, "direct", later, 0)})
    with pytest.raises(gate.SaleEnded):
        gate.admit(
            customer_id=1,
            idempotency_key="k",
            lines={"HOT": 1},
            rules={"HOT": GateRule(0, "direct", earlier - 1, earlier)},
        )
    assert counter() == 5 and not gate.counters(skus=["HOT"])["HOT"]["refused"]  # not counted as sold out
    assert gate.admit(
        customer_id=1, idempotency_key="k", lines={"HOT": 2}, rules={"HOT": GateRule(0, "direct", earlier, later)}
    )
    assert counter() == 3


def test_seed_flash_sale_takes_a_window(capsys, django_capture_on_commit_callbacks):
    from django.core.management.base import CommandError

    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "seed_flash_sale",
            "HOT",
            "--stock",
            "3",
            "--price",
            "999",
            "--starts-at",
            "2030-01-01T10:00:00+00:00",
            "--ends-at",
            "2030-01-01T11:00",
        )
    sale = FlashSale.objects.get()
    assert sale.starts_at.isoformat() == "2030-01-01T10:00:00+00:00" and sale.ends_at > sale.starts_at
    assert "from 2030-01-01T10:00:00+00:00" in capsys.readouterr().out
    with pytest.raises(CommandError, match="ends after it starts"):
        call_command(
            "seed_flash_sale",
            "HOT",
            "--stock",
            "3",
            "--starts-at",
            "2030-01-01T10:00:00+00:00",
            "--ends-at",
            "2030-01-01T09:00:00+00:00",
        )
    with pytest.raises(CommandError, match="not an ISO 8601 date or date-time"):
        call_command("seed_flash_sale", "HOT", "--stock", "3", "--starts-at", "tomorrow")


def test_the_sale_price_applies_inside_the_window_only_and_the_order_keeps_it(
    redis, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from inventory.services.flash_sales import end_flash_sale, seed_flash_sale, update_flash_sale
    from orders.models import Order
    from shop.models import Promotion

    later = timezone.now() + timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="HOT", stock=5, price=1000, sale_price=600, starts_at=later)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 2})
    before = shopper.get("/api/cart").json()
    assert before["total"] == 2000 and before["discounts"] == []  # not open yet: the catalog price
    assert shopper.get("/api/products/HOT").json()["flash_sale"]["sale_price"] == 600

    with django_capture_on_commit_callbacks(execute=True):
        update_flash_sale(sku="HOT", starts_at=timezone.now() - timedelta(seconds=1))  # open now
    inside = shopper.get("/api/cart").json()
    assert inside["total"] == 1200 and inside["items"][0]["discount"] == 800
    order = checkout(shopper, key="k1").json()
    assert (order["total"], order["items"][0]["unit_price"], order["items"][0]["discount"]) == (1200, 1000, 800)

    with django_capture_on_commit_callbacks(execute=True):
        end_flash_sale(sku="HOT")
    assert not Promotion.objects.exists()  # the sale's price went with it
    assert Order.objects.get(id=order["id"]).total_amount == 1200  # the order keeps it
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert shopper.get("/api/cart").json()["total"] == 1000


def test_seed_flash_sale_takes_a_sale_price_and_a_reseed_keeps_it(capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_flash_sale", "HOT", "--stock", "3", "--price", "999", "--sale-price", "499")
        call_command("seed_flash_sale", "HOT", "--stock", "9")
    sale = FlashSale.objects.get()
    assert sale.sale_price == 499 and sale.promotion.value == 499 and counter() == 9
    assert "at 499" in capsys.readouterr().out
