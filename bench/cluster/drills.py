"""The four drills of bench.cluster (its docstring says what each checks): a flash sale through HAProxy by bench
shoppers over both nodes, and what each drill does to the cluster meanwhile (bench/cluster/control.py)."""

import json
import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings
from django.utils import timezone
from django_redis import get_redis_connection

from bench import harness as h
from bench.cluster import control as c
from cart.storage import cart_key
from core.kafka import client_config, read_to_end
from core.sharding import customer_redis
from inventory import gate
from inventory.models import Stock
from inventory.services.flash_sales import seed_flash_sale
from orders.models import Order, OrderItem, OrderStatus
from outbox.models import OutboxEvent, ProcessedEvent
from shop.models import Product

SKU = "BENCH-CLUSTER"
PREFIX = "bench-cluster-"


# --- shoppers and a sale ----------------------------------------------------------------------------------------


class Sale:
    """A flash sale of `units` one-unit carts of `shoppers` bench shoppers; checkouts through the load balancer."""

    def __init__(self, *, units: int, shoppers: int, mode: str, clients: int) -> None:
        self.people = h.ensure_shoppers(shoppers, prefix=PREFIX)
        self.ids = [p.user_id for p in self.people]
        h.delete_orders(self.ids)
        h.end_sale(SKU)
        h.ensure_products([SKU], 0)
        seed_flash_sale(sku=SKU, stock=units, price=1000, name="Cluster sale", mode=mode)
        h.fill_carts([(i, {SKU: 1}) for i in self.ids])
        self.units, self.clients, self.mode = units, clients, mode
        self.started = int(time.time() * 1000)
        self.statuses: Counter = Counter()
        self.failed: list[h.Shopper] = []  # no answer, or a 5xx: retried with the same key
        self.retried: Counter = Counter()  # the answers the retries ended with
        self.done = 0
        self.lock = threading.Lock()

    def checkout(self, shopper) -> int:
        # A key of this sale's own: an earlier run's replay marker under the same key would make this
        # checkout a retry of that one (admitted without the gate, as a retry is).
        key = f"c{self.started}-{shopper.user_id}"
        return c.api(shopper, "POST", "/api/orders", b"", headers={"Idempotency-Key": key})

    def run(self, during=None) -> float:
        """Every shopper checks out once; `during(sale)` runs in a thread alongside. Seconds taken."""
        started = time.monotonic()
        side = threading.Thread(target=during, args=(self,)) if during else None
        if side:
            side.start()

        def one(shopper):
            status = self.checkout(shopper)
            with self.lock:
                self.statuses[status] += 1
                self.done += 1
            if status == 0 or status >= 500:  # as a client would: the same key again, a moment later
                with self.lock:
                    self.failed.append(shopper)
                for _ in range(20):
                    time.sleep(0.25)
                    status = self.checkout(shopper)
                    if status and status < 500:
                        break
                with self.lock:
                    self.retried[status] += 1

        with ThreadPoolExecutor(self.clients) as pool:
            list(pool.map(one, self.people))
        if side:
            side.join()
        return time.monotonic() - started

    def a_third_done(self) -> None:
        """Returns once a third of the shoppers have had their first answer: when the drills strike."""
        while self.done < len(self.people) // 3:
            time.sleep(0.02)

    def orders(self) -> int:
        return (
            OrderItem.objects.filter(order__customer_id__in=self.ids, product_id=SKU)
            .exclude(order__status=OrderStatus.REJECTED)
            .count()
        )

    def settle(self, seconds: float = 60) -> int:
        """Orders once the queue is written (queue mode: every 202 written), or when the count has not
        grown for 10 s."""
        accepted = self.statuses[201] + self.statuses[202] + self.retried[201] + self.retried[202]
        last, stable_since, deadline = -1, time.monotonic(), time.monotonic() + seconds
        while time.monotonic() < deadline:
            now = self.orders()
            if now >= accepted:
                return now
            if now != last:
                last, stable_since = now, time.monotonic()
            elif time.monotonic() - stable_since > 10:
                break
            time.sleep(0.5)
        return max(last, 0)

    def five_hundreds(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500 or status == 0)


def stock_row() -> tuple[int, int]:
    return Stock.objects.filter(product_id=SKU).values_list("available", "reserved").get()


def remaining() -> int:
    """What the gate has left of the sale."""
    return gate.counters(skus=[SKU])[SKU]["remaining"]


# --- the drills ---------------------------------------------------------------------------------------------------


def drill_sale(args, results: dict) -> list[tuple]:
    checks = []
    for mode in ("direct", "queue"):
        sale = Sale(units=args.units, shoppers=args.shoppers, mode=mode, clients=args.clients)
        redis = get_redis_connection("default")
        redis.config_resetstat()
        cpu = c.redis_cpu(redis)
        seconds = sale.run()
        orders = sale.settle()
        bad = sale.five_hundreds()
        scripts = redis.info("commandstats").get("cmdstat_evalsha", {})
        per_checkout = (c.redis_cpu(redis) - cpu) / args.shoppers * 1000
        results[f"sale_{mode}"] = {
            "seconds": round(seconds, 1),
            "orders": orders,
            "5xx": bad,
            "statuses": dict(sale.statuses),
            "scripts": scripts,
            "redis_cpu_ms_per_checkout": round(per_checkout, 3),
        }
        print(
            f"sale ({mode}): {args.shoppers} checkouts in {seconds:.1f} s ({args.shoppers / seconds:.0f}/s), "
            f"{orders} orders, {bad} x 5xx, statuses {dict(sorted(sale.statuses.items()))}; Redis: "
            f"{scripts.get('calls', 0)} scripts at {scripts.get('usec_per_call', 0)} us each "
            f"(one core: {1e6 / max(scripts.get('usec_per_call', 1), 1):,.0f} scripts/s), "
            f"{per_checkout:.3f} CPU ms per checkout"
        )
        checks += [
            (f"sale ({mode}): exactly {args.units} orders", orders == args.units),
            (f"sale ({mode}): 0 x 5xx", bad == 0),
        ]
    return checks


def consumed(order_ids: list[str]) -> tuple[int, int, int]:
    """(events of these orders not yet published, OrderCreated events, of those, how many the warehouse applied)."""
    events = OutboxEvent.objects.filter(aggregate_type="order", aggregate_id__in=order_ids)
    waiting = events.filter(published_at__isnull=True).count()
    created = list(events.filter(event_type="OrderCreated").values_list("event_id", flat=True))
    applied = ProcessedEvent.objects.filter(consumer="warehouse", event_id__in=created).count()
    return waiting, len(created), applied


def in_kafka(event_ids: set[str]) -> tuple[int, int]:
    """(messages of these events in the run's orders topic, distinct events among them), read from its
    beginning to each partition's end (a broker's offsets need not count messages: Tansu's do not)."""
    topic = settings.KAFKA_ORDERS_TOPIC
    consumer = Consumer(
        client_config(**{"group.id": "bench-cluster-probe", "enable.auto.commit": False, "enable.partition.eof": True})
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        messages = read_to_end(consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions], timeout=10)
    finally:
        consumer.close()
    seen = Counter(json.loads(message.value())["event_id"] for message in messages)
    seen = Counter({event_id: n for event_id, n in seen.items() if event_id in event_ids})
    return sum(seen.values()), len(seen)


def drill_node(args, results: dict) -> list[tuple]:
    """As many units as shoppers: every checkout must end with its order, retried or not."""
    sale = Sale(units=args.shoppers, shoppers=args.shoppers, mode="direct", clients=args.clients)
    timings: dict = {}
    first_event = (OutboxEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    recoveries_before = len(c.relay_recoveries())

    def kill_midway(sale: Sale) -> None:
        sale.a_third_done()
        # At the worst moment for the events: node 1's relay first, while it leads a run that has produced,
        # then the rest of the node (kill-node takes tens of ms to find them: the run would end meanwhile).
        relay = c.node_process(1, "relay_outbox")
        timings["relay_leader_at_kill"] = c.relay_leader(wait_for="relay_outbox node 1", seconds=5)
        if relay and timings["relay_leader_at_kill"].endswith("relay_outbox node 1"):
            os.kill(relay, signal.SIGKILL)
        killed = time.monotonic()
        timings["gate_at_kill"] = remaining()
        timings["orders_at_kill"] = sale.orders()
        c.cluster("kill-node", "1")
        timings["killed_after"] = sale.done
        while not c.haproxy_states().get("node1", "").startswith("DOWN") and time.monotonic() - killed < 30:
            time.sleep(0.05)
        timings["marked_down_s"] = round(time.monotonic() - killed, 2)

    seconds = sale.run(during=kill_midway)
    failed_ids = [s.user_id for s in sale.failed]
    per_key = Counter(Order.objects.filter(customer_id__in=failed_ids).values_list("customer_id", flat=True))
    orders = sale.orders()
    order_ids = [str(i) for i in Order.objects.filter(customer_id__in=sale.ids).values_list("id", flat=True)]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        waiting, created, applied = consumed(order_ids)
        if not waiting and applied == created:
            break
        time.sleep(1)
    written_ids = {str(e) for e in OutboxEvent.objects.filter(id__gte=first_event).values_list("event_id", flat=True)}
    written = len(written_ids)
    published, distinct = in_kafka(written_ids)
    recovered = c.relay_recoveries()[recoveries_before:]
    available, reserved = stock_row()
    gate_before = remaining()
    c.sync_gate(SKU)
    gate_after = remaining()
    results["node"] = {
        **timings,
        "seconds": round(seconds, 1),
        "statuses": dict(sale.statuses),
        "failed_first": len(sale.failed),
        "retries_ended": dict(sale.retried),
        "orders": orders,
        "events_waiting": waiting,
        "order_created": created,
        "warehouse_applied": applied,
        "events_written": written,
        "messages_in_kafka": published,
        "distinct_in_kafka": distinct,
        "unfinished_relay_runs_marked": recovered,
        "gate_before_sync": gate_before,
        "gate_after_sync": gate_after,
        "available": available,
    }
    print(
        f"node 1 killed after {timings['killed_after']} checkouts (relay leader then: "
        f"{timings['relay_leader_at_kill'] or 'none'}): HAProxy marked it down in "
        f"{timings['marked_down_s']} s; {len(sale.failed)} checkouts failed first (no answer or 5xx), their "
        f"retries with the same key ended {dict(sale.retried)}; {orders} orders for {args.shoppers} shoppers; "
        f"events unpublished {waiting}, written {written}, in Kafka {published} messages of {distinct} of them "
        f"(unfinished relay runs found: {len(recovered)}, events of theirs marked from Kafka: {recovered}); "
        f"OrderCreated {created}, applied "
        f"by the warehouse {applied}; statuses "
        f"{dict(sorted(sale.statuses.items()))}; gate {gate_before} before flash_sale_sync, {gate_after} after, "
        f"{available} available"
    )
    c.cluster("start-node", "1")
    return [
        (
            "node: HAProxy stopped sending to the dead node within its checks (fall 2 x inter 1 s, + 1 s)",
            timings["marked_down_s"] <= 3.0,
        ),
        (
            "node: every retried checkout got its order, created once",
            set(sale.retried) <= {200, 201}
            and len(per_key) == len(sale.failed)
            and all(n == 1 for n in per_key.values()),
        ),
        (
            f"node: no oversell ({orders} orders + {available} available = {args.shoppers} units)",
            orders + available == args.shoppers and reserved == orders,
        ),
        (
            "node: gate and database equal after flash_sale_sync (units the dead node's requests had "
            "admitted come back)",
            gate_after == available,
        ),
        (
            "node: every event in Kafka, each OrderCreated applied by the warehouse once",
            waiting == 0 and distinct == written and applied == created,
        ),
        (
            "node: no event twice in Kafka (a relay killed between Kafka's ack and its mark: the next leader "
            "marks what Kafka has instead of publishing it again)",
            published == distinct,
        ),
    ]


def drill_redis(args, results: dict) -> list[tuple]:
    sale = Sale(units=args.units, shoppers=args.shoppers, mode="direct", clients=args.clients)
    # Carts written through the API a second before the kill, by shoppers not in the sale.
    keepers = h.ensure_shoppers(50, prefix=f"{PREFIX}cart-")
    timings: dict = {}
    demo_sku = "MUG-001" if Product.objects.filter(sku="MUG-001").exists() else Product.objects.first().sku
    json_body = {"Content-Type": "application/json"}

    def kill_primary(sale: Sale) -> None:
        sale.a_third_done()
        timings["carts_written"] = Counter(
            c.api(k, "PUT", f"/api/cart/items/{demo_sku}", b'{"quantity": 2}', timeout=10, headers=json_body)
            for k in keepers
        )
        time.sleep(1.0)
        old = c.kill_redis_primary()
        killed = time.monotonic()
        probe, deadline = keepers[0], killed + 60
        # a request that needs Redis, through HAProxy
        while c.api(probe, "GET", "/api/cart", timeout=2) != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        timings["serving_again_s"] = round(time.monotonic() - killed, 2)
        timings["new_primary"] = c.redis_primary()
        timings["failed_meanwhile"] = sale.five_hundreds()
        timings["old_primary"] = old

    sale.run(during=kill_primary)
    orders = sale.settle(10)
    available, reserved = stock_row()
    c.sync_gate(SKU)
    left = remaining()
    kept = sum(1 for k in keepers if customer_redis().hget(cart_key(k.user_id), demo_sku))
    old = timings["old_primary"]
    c.start_redis(old)  # the old primary back, as a replica of the new one
    results["redis"] = {
        **{k: v for k, v in timings.items() if k != "carts_written"},
        "orders": orders,
        "statuses": dict(sale.statuses),
        "retries_ended": dict(sale.retried),
        "carts_kept": kept,
        "stock": [available, reserved],
        "gate_after_sync": left,
    }
    print(
        f"Redis primary :{old} killed: the shop served again after {timings['serving_again_s']} s "
        f"(new primary :{timings['new_primary']}); {timings['failed_meanwhile']} checkouts refused meanwhile; "
        f"{orders} orders; gate after flash_sale_sync {left} = available {available}; "
        f"carts kept {kept}/{len(keepers)}; statuses {dict(sorted(sale.statuses.items()))}"
    )
    return [
        ("redis: a replica promoted, the shop serving again without a restart", timings["new_primary"] != old),
        (
            f"redis: no oversell ({orders} <= {args.units}, available + reserved = {args.units})",
            orders <= args.units and available + reserved == args.units,
        ),
        ("redis: gate and database consistent after flash_sale_sync", left == available),
        ("redis: carts written a second before the kill kept (on the carts' cluster)", kept == len(keepers)),
    ]


def drill_beats(args, results: dict) -> list[tuple]:
    """Both nodes' beats run expiry every 5 s, publishing every second and the purge every 20 s (control.NODE_ENV)."""
    people = h.ensure_shoppers(200, prefix=f"{PREFIX}beat-")
    ids = [p.user_id for p in people]
    h.delete_orders(ids)
    h.ensure_products(["BENCH-BEAT"], 1_000_000)
    # Old published events for the beats' purge (every 20 s) to delete: written published, so that no relay
    # publishes them (and stamps them as new) before they are made old.
    month_ago = timezone.now() - timedelta(days=30)
    old = [
        event.id
        for event in OutboxEvent.objects.bulk_create(
            OutboxEvent(
                aggregate_type="bench", aggregate_id=str(n), event_type="BenchOld", payload={}, published_at=month_ago
            )
            for n in range(1000)
        )
    ]
    started = time.monotonic()
    placed = 0
    from orders.services import place_order

    while time.monotonic() - started < args.beat_minutes * 60:
        h.fill_carts([(i, {"BENCH-BEAT": 1}) for i in ids])
        for customer in ids:  # a wave of orders, due at once: the beats' expiry takes them
            place_order(customer_id=customer, idempotency_key=f"beat-{placed}-{customer}")
        Order.objects.filter(customer_id__in=ids, status=OrderStatus.PENDING_PAYMENT).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
        placed += len(ids)
        time.sleep(20)
    time.sleep(15)
    orders = Order.objects.filter(customer_id__in=ids)
    order_ids = [str(i) for i in orders.values_list("id", flat=True)]
    cancelled = OutboxEvent.objects.filter(aggregate_id__in=order_ids, event_type="OrderCancelled")
    per_order = Counter(cancelled.values_list("aggregate_id", flat=True))
    cancel_events = sum(per_order.values())  # counted now: the clean-up below deletes them
    unpublished = OutboxEvent.objects.filter(aggregate_id__in=order_ids, published_at__isnull=True).count()
    expired = orders.filter(status=OrderStatus.CANCELLED).count()
    stock = Stock.objects.filter(product_id="BENCH-BEAT").values_list("reserved", flat=True).get()
    old_left = OutboxEvent.objects.filter(id__in=old).count()
    results["beats"] = {
        "placed": placed,
        "expired": expired,
        "cancel_events": cancel_events,
        "twice": sum(1 for n in per_order.values() if n > 1),
        "unpublished": unpublished,
        "reserved_left": stock,
        "old_events_left": old_left,
    }
    print(
        f"two beats for {args.beat_minutes} min: {placed} orders placed and expired {expired} "
        f"({cancel_events} OrderCancelled, {results['beats']['twice']} twice); unpublished {unpublished}; "
        f"units still reserved {stock}; old published events left after the purges {old_left} of 1,000"
    )
    h.delete_orders(ids)
    return [
        (
            "beats: every order expired once, its stock back once",
            expired == placed and stock == 0 and results["beats"]["twice"] == 0 and cancel_events == placed,
        ),
        ("beats: every event published", unpublished == 0),
        (
            "beats: the purge deleted the old events (two purges at once: tests/config/test_beat_on_every_node.py)",
            old_left == 0,
        ),
    ]


# --- the carts' Redis Cluster ---------------------------------------------------------------------------------------


class CartTraffic:
    """Shoppers each writing one line of their cart through HAProxy in a loop, a new quantity each time, until
    stopped: per request (sent, done, status, quantity), monotonic seconds."""

    def __init__(self, shoppers: list, sku: str) -> None:
        self.shoppers, self.sku = shoppers, sku
        self.log: dict[int, list[tuple[float, float, int, int]]] = {s.user_id: [] for s in shoppers}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(s,)) for s in shoppers]

    def __enter__(self) -> "CartTraffic":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _write(self, shopper) -> None:
        n, headers = 0, {"Content-Type": "application/json"}
        while not self.stop.is_set():
            n += 1
            quantity = n % 90 + 1  # no two of the last 90 writes alike
            sent = time.monotonic()
            status = c.api(
                shopper,
                "PUT",
                f"/api/cart/items/{self.sku}",
                b'{"quantity": %d}' % quantity,
                timeout=10,
                headers=headers,
            )
            self.log[shopper.user_id].append((sent, time.monotonic(), status, quantity))
            time.sleep(0.02)

    def failures(self) -> list[tuple[float, float, int]]:
        """(sent, done, status) of every answer that was not a 200."""
        return [(sent, done, status) for log in self.log.values() for sent, done, status, _ in log if status != 200]

    def stored(self, shopper) -> int | None:
        quantity = customer_redis().hget(cart_key(shopper.user_id), self.sku)
        return int(quantity) if quantity is not None else None


def demo_sku() -> str:
    return "MUG-001" if Product.objects.filter(sku="MUG-001").exists() else Product.objects.first().sku


def cart_shoppers() -> list:
    """Shoppers for cart traffic, not in any sale, their carts empty."""
    shoppers = h.ensure_shoppers(240, prefix=f"{PREFIX}cart-")
    customer_redis().delete(*[cart_key(s.user_id) for s in shoppers])
    return shoppers


def drill_shard(args, results: dict) -> list[tuple]:
    """A primary of the carts' Redis Cluster killed (kill -9) a third into a sale, under cart traffic."""
    sale = Sale(units=args.units, shoppers=args.shoppers, mode="direct", clients=args.clients)
    pool, sku = cart_shoppers(), demo_sku()
    victim = c.shard_primary_of(cart_key(pool[0].user_id))
    on_victim = [s for s in pool if c.shard_primary_of(cart_key(s.user_id)) == victim]
    witnesses = on_victim[:20]  # they stop writing at the kill: what they find afterwards is compared
    # They write throughout, on every shard: a third on the victim's, who show when it serves again.
    writers = on_victim[20:30] + [s for s in pool if s not in on_victim][:20]
    timings: dict = {}

    def kill_shard(sale: Sale) -> None:
        with CartTraffic(writers, sku) as traffic:
            with CartTraffic(witnesses, sku) as watched:
                sale.a_third_done()
                time.sleep(1.0)
                watched.stop.set()
                killed = time.monotonic()
                c.kill_shard_primary(victim)
            timings.update(killed=killed, watched=watched)
            probes = writers[:10]
            deadline = killed + 60
            while time.monotonic() < deadline and not any(
                status == 200 and sent > killed for s in probes for sent, _, status, _ in traffic.log[s.user_id]
            ):
                time.sleep(0.05)
            timings["serving_again_s"] = round(time.monotonic() - killed, 2)
            time.sleep(3.0)  # traffic goes on a while on the promoted replica
        timings["traffic"] = traffic

    sale.run(during=kill_shard)
    orders = sale.settle(10)
    available, reserved = stock_row()
    killed, traffic, watched = timings["killed"], timings["traffic"], timings["watched"]
    c.forget_client()  # this process's client learns the cluster anew
    new_primary = c.shard_primary_of(cart_key(witnesses[0].user_id))
    lost, lost_ages = 0, []
    for witness in witnesses:
        log = watched.log[witness.user_id]
        acked = [(done, quantity) for sent, done, status, quantity in log if status == 200 and done < killed]
        in_flight = {quantity for sent, done, _, quantity in log if sent < killed <= done}
        stored = watched.stored(witness)
        if acked and stored != acked[-1][1] and stored not in in_flight:
            lost += 1
            lost_ages.append(killed - acked[-1][0])
    failures = traffic.failures() + watched.failures()
    late = [round(done - killed, 2) for _, done, _ in failures]
    window = timings["serving_again_s"] + 1.0
    c.start_shard_node(victim)
    rejoined = any(n["port"] == victim and not n["primary"] and not n["failed"] for n in _after(c.shard_nodes, 30))
    writes = sum(len(log) for log in traffic.log.values())
    results["shard"] = {
        "killed_primary": victim,
        "new_primary": new_primary,
        "serving_again_s": timings["serving_again_s"],
        "cart_writes": writes,
        "cart_failures": len(failures),
        "failure_statuses": dict(Counter(status for _, _, status in failures)),
        "failures_after_kill_s": [min(late, default=None), max(late, default=None)],
        "witnesses_lost": lost,
        "lost_acked_before_kill_ms": [round(age * 1000) for age in lost_ages],
        "orders": orders,
        "statuses": dict(sale.statuses),
        "retries_ended": dict(sale.retried),
        "stock": [available, reserved],
        "old_primary_rejoined_as_replica": rejoined,
    }
    print(
        f"carts' cluster primary :{victim} killed: its carts served again after {timings['serving_again_s']} s "
        f"(new primary :{new_primary}); {len(failures)} of {writes} cart writes failed "
        f"({results['shard']['failure_statuses']}, {min(late, default=0):.2f}-{max(late, default=0):.2f} s "
        f"after the kill); witnesses: {lost} of {len(witnesses)} lost their last acknowledged write "
        f"{[round(a * 1000) for a in lost_ages]} ms before the kill; {orders} orders, checkouts "
        f"{dict(sorted(sale.statuses.items()))}, retried {dict(sale.retried)}"
    )
    return [
        ("shard: a replica promoted, carts served again without a restart", new_primary != victim),
        (
            f"shard: cart failures only within the failover window (<= {window:.1f} s)",
            all(0 <= t <= window for t in late),
        ),
        (
            f"shard: no oversell ({orders} <= {args.units}, available + reserved = {args.units})",
            orders <= args.units and available + reserved == args.units,
        ),
        (
            "shard: every cart written a second before the kill kept (a lost write only within the replication window)",
            all(age < 1.0 for age in lost_ages),
        ),
        ("shard: the old primary back as a replica", rejoined),
    ]


def _after(read, seconds: float):
    """read() once it shows every node up, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        nodes = read()
        if not any(n["failed"] for n in nodes) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


def drill_reshard(args, results: dict) -> list[tuple]:
    """Slots moved between two primaries of the carts' cluster (redis-cli --cluster reshard) under cart traffic."""
    pool, sku = cart_shoppers(), demo_sku()
    writers = pool[:60]
    before = {s.user_id: c.shard_primary_of(cart_key(s.user_id)) for s in writers}
    primaries = sorted((n for n in c.shard_nodes() if n["primary"]), key=lambda n: n["port"])
    source = next(n for n in primaries if n["port"] == before[writers[0].user_id])
    target = next(n for n in primaries if n is not source)
    with CartTraffic(writers, sku) as traffic:
        time.sleep(1.0)
        seconds = c.move_slots(source=source["id"], target=target["id"], slots=args.slots)
        time.sleep(1.0)
    c.forget_client()
    moved = sum(1 for s in writers if c.shard_primary_of(cart_key(s.user_id)) != before[s.user_id])
    failures = traffic.failures()
    consistent = sum(
        1
        for s in writers
        if (acked := [q for _, _, status, q in traffic.log[s.user_id] if status == 200])
        and traffic.stored(s) == acked[-1]
    )
    writes = sum(len(log) for log in traffic.log.values())
    results["reshard"] = {
        "slots": args.slots,
        "seconds": round(seconds, 1),
        "cart_writes": writes,
        "failures": len(failures),
        "failure_statuses": dict(Counter(status for _, _, status in failures)),
        "writers_moved": moved,
        "carts_as_last_written": consistent,
    }
    print(
        f"reshard: {args.slots} slots :{source['port']} -> :{target['port']} in {seconds:.1f} s under {writes} cart "
        f"writes by {len(writers)} shoppers ({moved} of their carts moved): {len(failures)} failed "
        f"{dict(Counter(status for _, _, status in failures))}; {consistent}/{len(writers)} carts as last written"
    )
    return [
        (f"reshard: carts moved under traffic ({moved} of {len(writers)})", moved > 0),
        ("reshard: no error a shopper sees", not failures),
        ("reshard: every cart as its shopper last wrote it", consistent == len(writers)),
    ]


DRILLS = {
    "sale": drill_sale,
    "node": drill_node,
    "redis": drill_redis,
    "shard": drill_shard,
    "reshard": drill_reshard,
    "beats": drill_beats,
}
