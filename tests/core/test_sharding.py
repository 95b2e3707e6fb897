"""Carts, guest carts, rate limits and saved addresses on a real Redis Cluster
(REDIS_CLUSTER_NODES, core/sharding.py): 3 primaries started by
scripts/redis_cluster.sh, every script's keys in one hash slot, the hot-cache
generation copied into every bucket."""

import subprocess
import time
from collections import Counter
from datetime import date
from pathlib import Path

import pytest
from redis.crc import key_slot
from rest_framework.test import APIClient

from cart import storage
from cart.services import _guest_digest
from core import ratelimit, redis_scripts, sharding
from core.hotcache import GENERATION_KEY, bump_generation, hot_cache, sync_generations
from core.sharding import BUCKETS, cluster, customer_bucket, text_bucket
from inventory import gate
from orders.models import Order
from orders.services import admission, queue_writing
from orders.services.queue_admission import QueuedRequest, pending_key
from shop.models import ShippingMethod, ShippingZone, TaxRate
from shop.services import address_key
from tests.factories import PASSWORD, UserFactory, VoucherFactory, product_with_stock
from tests.helpers import checkout, run_in_threads, shopper_client
from tests.inventory.conftest import counter, seed

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "redis_cluster.sh"
BASE, PRIMARIES = 7100, 3
NODES = [f"127.0.0.1:{BASE + i}" for i in range(PRIMARIES)]


@pytest.fixture(scope="module")
def started_cluster():
    subprocess.run([SCRIPT, "start", str(BASE), str(PRIMARIES), "0"], check=True, capture_output=True)
    yield
    subprocess.run([SCRIPT, "stop", str(BASE), str(PRIMARIES), "0"], check=False, capture_output=True)


@pytest.fixture
def on_cluster(started_cluster, settings, redis, monkeypatch):
    """Per-customer keys on the cluster, emptied; every script call's keys recorded."""
    settings.REDIS_CLUSTER_NODES = NODES
    client = cluster()
    client.flushall(target_nodes=client.ALL_NODES)
    hot_cache.clear()
    calls = []
    run = redis_scripts.run_script

    def recording(source, *, keys, args, alias="default"):
        calls.append((alias, list(keys)))
        return run(source, keys=keys, args=args, alias=alias)

    monkeypatch.setattr(redis_scripts, "run_script", recording)
    for module in (storage, ratelimit, admission, gate):
        monkeypatch.setattr(module, "run_script", recording)
    client.calls = calls
    yield client
    client = cluster()  # a new one when a test started the cluster again
    client.flushall(target_nodes=client.ALL_NODES)
    hot_cache.clear()


def put(client, sku, quantity, token=None):
    headers = {"HTTP_CART_TOKEN": token} if token else {}
    return client.put(f"/api/cart/items/{sku}", {"quantity": quantity}, format="json", **headers)


def one_slot_each(calls) -> None:
    for alias, keys in calls:
        if alias == "carts":
            assert len({key_slot(key.encode()) for key in keys}) == 1, keys


def test_keys_carry_their_customers_bucket_on_a_cluster_and_none_on_one_redis(settings):
    assert storage.cart_key(1042) == "cart:1042" and address_key(1042) == "address:1042"
    settings.REDIS_CLUSTER_NODES = NODES
    assert storage.cart_key(1042) == "cart:{18}:1042"
    assert storage.taken_key(1042) == "cart:{18}:1042:taken"
    assert address_key(1042) == "address:{18}:1042"
    cart, live = storage.guest_cart_keys("ab" * 32)
    assert cart.startswith(f"cart:guest:{{{text_bucket('ab' * 32)}}}:") and live.endswith(":live")


def test_buckets_spread_evenly_over_three_shards():
    ranges = [(0, 5460), (5461, 10922), (10923, 16383)]  # what redis-cli --cluster create gives 3 primaries
    shards = Counter(
        next(i for i, (low, high) in enumerate(ranges) if low <= key_slot(f"{{{b}}}".encode()) <= high)
        for b in range(BUCKETS)
    )
    assert all(0.28 * BUCKETS <= shards[i] <= 0.39 * BUCKETS for i in range(3)), shards


def test_a_shoppers_cart_life_on_the_cluster_every_script_in_one_slot(on_cluster):
    product_with_stock(sku="A", price=300, available=5)
    product_with_stock(sku="B", price=200, available=5)
    shoppers = [shopper_client() for _ in range(6)]
    for shopper in shoppers:
        assert put(shopper, "A", 2).status_code == 200
        assert put(shopper, "B", 1).status_code == 200
        body = shopper.get("/api/cart").json()
        assert body["total"] == 800 and [i["sku"] for i in body["items"]] == ["A", "B"]
    # the carts are on the cluster (not on the single Redis), over more than one shard
    holders = {on_cluster.get_node_from_key(storage.cart_key(s.user.id)).port for s in shoppers}
    assert all(on_cluster.hlen(storage.cart_key(s.user.id)) == 2 for s in shoppers) and len(holders) >= 2
    assert on_cluster.calls and all(alias == "carts" for alias, _ in on_cluster.calls)
    one_slot_each(on_cluster.calls)


def test_guest_cart_and_its_merge_at_login_across_shards(on_cluster):
    product_with_stock(sku="A", price=300, available=5)
    product_with_stock(sku="B", price=200, available=5)
    guest = APIClient()
    token = put(guest, "A", 2)["Cart-Token"]
    assert put(guest, "B", 1, token).status_code == 200
    user = UserFactory()
    # a shopper whose cart lies on another shard than the guest cart
    while on_cluster.get_node_from_key(storage.cart_key(user.id)) == on_cluster.get_node_from_key(
        storage.guest_cart_keys(_guest_digest(token))[0]
    ):
        user = UserFactory()
    shopper = shopper_client(user)
    assert put(shopper, "A", 3).status_code == 200
    login = APIClient().post(
        "/api/auth/token", {"username": user.username, "password": PASSWORD}, format="json", HTTP_CART_TOKEN=token
    )
    assert login.status_code == 200, login.content
    items = {i["sku"]: i["quantity"] for i in shopper.get("/api/cart").json()["items"]}
    assert items == {"A": 3, "B": 1}  # the larger quantity, the guest's new line
    assert guest.get("/api/cart", HTTP_CART_TOKEN=token).status_code == 404  # the token died with the merge
    assert not on_cluster.exists(*storage.guest_cart_keys(_guest_digest(token)))
    one_slot_each(on_cluster.calls)


def test_checkout_takes_the_cart_on_the_cluster_and_gives_it_back_when_refused(on_cluster):
    product_with_stock(sku="A", price=300, available=1)
    first, second = shopper_client(), shopper_client()
    for shopper in (first, second):
        assert put(shopper, "A", 1).status_code == 200
    assert checkout(first, "k1").status_code == 201
    assert not on_cluster.exists(storage.cart_key(first.user.id))  # ordered: the cart is gone
    refused = checkout(second, "k2")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "out_of_stock"
    assert on_cluster.hgetall(storage.cart_key(second.user.id)) == {b"A": b"1"}  # given back
    assert Order.objects.count() == 1
    one_slot_each(on_cluster.calls)


def test_rate_limits_count_on_the_cluster(on_cluster, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "cart_write": "3/min"}
    product_with_stock(sku="A", available=5)
    shopper = shopper_client()
    statuses = [put(shopper, "A", n).status_code for n in (1, 2, 3, 4)]
    assert statuses == [200, 200, 200, 429]
    one_slot_each(on_cluster.calls)


def test_a_bump_moves_every_bucket_and_a_lost_copy_is_written_again(on_cluster):
    product_with_stock(sku="A", available=5)
    shopper = shopper_client()
    assert put(shopper, "A", 1).status_code == 200
    bump_generation()
    generation = on_cluster.get(GENERATION_KEY)
    copies = on_cluster.mget_nonatomic([f"{GENERATION_KEY}:{{{b}}}" for b in range(BUCKETS)])
    assert generation and set(copies) == {generation}
    assert put(shopper, "A", 2).status_code == 200  # stale caches dropped, served again

    lost = f"{GENERATION_KEY}:{{{customer_bucket(shopper.user.id)}}}"
    on_cluster.delete(lost)  # as a shard failing over before replicating it would
    assert sync_generations() == 1 and on_cluster.get(lost) == generation  # beat's repair
    assert put(shopper, "A", 3).status_code == 200

    on_cluster.delete(lost)
    refused = put(shopper, "A", 4)  # stale, and stale again on the retry: the request repairs the copy
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "catalog_changing"
    assert on_cluster.get(lost) == generation
    assert put(shopper, "A", 4).status_code == 200
    assert sync_generations() == 0


def test_the_whole_cluster_down_is_503_never_500_and_limits_fail_open(on_cluster, client):
    product_with_stock(sku="A", available=5)
    shopper = shopper_client()
    assert put(shopper, "A", 1).status_code == 200
    user = UserFactory()
    subprocess.run([SCRIPT, "stop", str(BASE), str(PRIMARIES), "0"], check=True, capture_output=True)
    try:
        for fresh_client in (False, True):  # a process that knew the cluster, then one starting now
            if fresh_client:
                sharding.forget_client()
            down = put(shopper, "A", 2)
            assert down.status_code == 503 and down.json()["error"]["code"] == "cart_unavailable", down.content
            guest = put(APIClient(), "A", 1)
            assert guest.status_code == 503, guest.content
        # the login's per-address rate limit lives on the cluster too: it fails open, the login works
        login = APIClient().post("/api/auth/token", {"username": user.username, "password": PASSWORD}, format="json")
        assert login.status_code == 200, login.content
    finally:
        subprocess.run([SCRIPT, "start", str(BASE), str(PRIMARIES), "0"], check=True, capture_output=True)
        sharding.forget_client()


def test_a_flash_sale_admits_on_the_gates_redis_with_carts_on_the_cluster(on_cluster):
    seed(stock=2)  # a sale of HOT, 1 per shopper, its gate on the gate's own Redis
    shoppers = [shopper_client() for _ in range(4)]
    for shopper in shoppers:
        assert put(shopper, "HOT", 1).status_code == 200
    statuses = [checkout(shopper, f"k{i}").status_code for i, shopper in enumerate(shoppers[:3])]
    assert statuses == [201, 201, 409] and counter() == 0
    assert on_cluster.hgetall(storage.cart_key(shoppers[2].user.id)) == {b"HOT": b"1"}  # refused: given back
    assert Order.objects.count() == 2

    on_cluster.calls.clear()
    late = checkout(shoppers[3], "k3")  # refused early: the cart read on its shard, the gate asked which SKUs
    assert late.status_code == 409 and late.json()["error"]["code"] == "sold_out"
    assert [alias for alias, _ in on_cluster.calls] == ["gate", "carts"]
    assert storage.cart_key(shoppers[3].user.id) in on_cluster.calls[1][1]
    one_slot_each(on_cluster.calls)


def test_the_queue_writers_clean_up_gives_carts_back_on_the_cluster_once(on_cluster, redis):
    product_with_stock(sku="A", available=5)
    shoppers = [shopper_client() for _ in range(3)]
    requests = []
    for i, shopper in enumerate(shoppers):
        assert put(shopper, "A", 1).status_code == 200
        generation = hot_cache.ensure_generation()
        storage.take_cart(customer_id=shopper.user.id, idempotency_key=f"q{i}", generation=generation)
        requests.append(QueuedRequest(9000 + i, shopper.user.id, f"q{i}", "hash", "EUR", [], queue_sku="A"))
        redis.zadd(pending_key("A"), {9000 + i: 1})
    written, rejected, used_up = requests
    outcomes = [(written, 9000, True), (rejected, 9001, False), (used_up, 9002, False)]
    for _ in range(2):  # a batch delivered twice is cleaned up once
        queue_writing.clean_up(outcomes, used_up={9002})
    assert not on_cluster.exists(storage.cart_key(written.customer_id))  # ordered: the cart stays taken
    assert on_cluster.hgetall(storage.cart_key(rejected.customer_id)) == {b"A": b"1"}
    assert on_cluster.hgetall(storage.cart_key(used_up.customer_id)) == {b"A": b"1"}
    assert not on_cluster.exists(storage.taken_key(rejected.customer_id), storage.taken_key(used_up.customer_id))
    assert redis.zcard(pending_key("A")) == 0
    one_slot_each(on_cluster.calls)


def test_readyz_names_redis_while_the_cluster_has_a_shard_down(on_cluster, client):
    from config import health

    health.forget_last_probe()
    assert client.get("/readyz").json()["services"]["redis"]["status"] == "up"
    victim = BASE + 2  # no replica here: its slots are down until it is back
    subprocess.run(["redis-cli", "-p", str(victim), "shutdown", "nosave"], check=False, capture_output=True)
    try:
        down = False
        for _ in range(50):  # the others mark it failed after the node timeout (2 s)
            health.forget_last_probe()
            response = client.get("/readyz")
            if response.status_code == 503 and "redis" in response.json()["down"]:
                down = True
                break
            time.sleep(0.2)
        assert down, response.json()
    finally:
        subprocess.run([SCRIPT, "start", str(BASE), str(PRIMARIES), "0"], check=True, capture_output=True)
        sharding.forget_client()  # the cluster is a new one: its nodes' ids and slots are learnt again
        health.forget_last_probe()


def test_vouchers_and_shipping_on_the_cluster_guest_and_shopper(on_cluster, settings):
    settings.PRICES_INCLUDE_TAX = True
    VoucherFactory(code="SPRING-10", value=10)
    TaxRate.objects.create(country="GB", tax_class_id="standard", rate=2000, valid_from=date(2000, 1, 1))
    uk = ShippingZone.objects.create(name="United Kingdom", countries=["GB"])
    ShippingMethod.objects.create(code="standard", name="Standard", zone=uk, price=499, min_days=2, max_days=4)
    product_with_stock(sku="MUG", price=1000, available=50, weight_grams=350)
    guest = APIClient()
    token = put(guest, "MUG", 2)["Cart-Token"]
    headers = {"HTTP_CART_TOKEN": token}
    entered = guest.put("/api/cart/voucher", {"code": "spring-10"}, format="json", **headers)  # counts the address
    assert entered.status_code == 200, entered.content
    chosen = guest.put("/api/cart/shipping-method", {"code": "standard", "country": "GB"}, format="json", **headers)
    assert chosen.status_code == 200, chosen.content
    assert (chosen.json()["voucher"]["code"], chosen.json()["shipping"]["code"]) == ("SPRING-10", "standard")

    shopper = shopper_client()
    assert put(shopper, "MUG", 1).status_code == 200
    assert shopper.put("/api/cart/voucher", {"code": "SPRING-10"}, format="json").status_code == 200
    assert shopper.delete("/api/cart/voucher").status_code == 204
    assert shopper.get("/api/cart").json()["voucher"] is None
    one_slot_each(on_cluster.calls)


def test_two_generation_syncs_at_once_leave_every_copy_at_the_counter(on_cluster):
    """Beat runs the sync on every node (docs/operations.md, "Scaling out"): two at once are one."""
    bump_generation()
    generation = on_cluster.get(GENERATION_KEY)
    on_cluster.delete(*[f"{GENERATION_KEY}:{{{b}}}" for b in range(0, BUCKETS, 3)])
    written = run_in_threads([sync_generations, sync_generations])
    copies = on_cluster.mget_nonatomic([f"{GENERATION_KEY}:{{{b}}}" for b in range(BUCKETS)])
    assert sorted(written) == [0, len(range(0, BUCKETS, 3))] and set(copies) == {generation}
