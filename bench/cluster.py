"""Drills on the local cluster (scripts/cluster.sh: HAProxy on :8000, two nodes, Redis with Sentinel).

    python -m bench.cluster                  every drill, in turn
    python -m bench.cluster --drills sale,node

  sale   a flash sale of --units through HAProxy, shoppers over both nodes: direct, then queue mode
         (a writer per node): exactly --units orders, 0 x 5xx
  node   node 1 killed (kill -9, every process; its relay first, while it leads a run) mid-sale: how long
         until HAProxy stops sending to it, what failed meanwhile; each failed checkout retried with its key
         through HAProxy, so on node 2 (its order created once); every event in Kafka once and every consumer
         effect applied once, node 2 taking the partitions
  redis  the Redis primary killed mid-sale: how long until the shop serves again (a replica promoted, no
         restart), what was refused meanwhile; no oversell; gate and database equal after flash_sale_sync;
         carts written a second before the kill kept
  beats  both nodes' beats for --beat-minutes: expiry, publishing and purging done once each, by counts

The bench (re)starts the cluster with the bench shoppers' limits lifted and stops it at the end."""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_redis import get_redis_connection

from bench import LIFTED
from bench import harness as h
from cart.storage import cart_key
from core.kafka import client_config, read_to_end
from inventory import gate
from inventory.models import Stock
from inventory.services.flash_sales import seed_flash_sale
from orders.models import Order, OrderItem, OrderStatus
from outbox.models import OutboxEvent, ProcessedEvent

LB = "http://127.0.0.1:8000"
CLUSTER = [str(h.ROOT / "scripts" / "cluster.sh")]
RUN = h.ROOT / ".run" / "cluster"
SKU = "BENCH-CLUSTER"
PREFIX = "bench-cluster-"
# The nodes' environment: bench shoppers hold many unpaid orders, all from one address (the bench's).
NODE_ENV = {**LIFTED, "RATE_LIMIT_CHECKOUT": "1000000/min", "RATE_LIMIT_CART_WRITE": "1000000/min",
            "ORDER_EXPIRY_INTERVAL_SECONDS": "5", "OUTBOX_PURGE_INTERVAL_SECONDS": "20"}


def parse_args(argv=None):
    p = h.parser(__doc__, units=(1000, "units on sale"), shoppers=(3000, "shoppers, one unit each"),
                 clients=(48, "requests in flight"), drills=("sale,node,redis,beats", "which drills, comma-separated"),
                 beat_minutes=(10.0, "how long both beats run in the beats drill"))  # fmt: skip
    return p.parse_args(argv)


# --- the cluster ------------------------------------------------------------------------------------------------


def cluster(*args: str, env: dict | None = None) -> None:
    subprocess.run([*CLUSTER, *args], check=True, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)


def restart_cluster() -> None:
    """With topics and consumer groups of this run's own (a group's members from an earlier run are
    not waited for), in the bench's environment too."""
    run = f"bench.cluster.{int(time.time())}"
    topics = {"KAFKA_ORDERS_TOPIC": f"{run}.orders", "KAFKA_CHECKOUT_TOPIC": f"{run}.checkout",
              "KAFKA_CONSUMER_GROUP_PREFIX": f"{run}."}  # fmt: skip
    os.environ.update(topics)
    settings.KAFKA_ORDERS_TOPIC, settings.KAFKA_CHECKOUT_TOPIC = topics["KAFKA_ORDERS_TOPIC"], topics[
        "KAFKA_CHECKOUT_TOPIC"]
    settings.KAFKA_CONSUMER_GROUP_PREFIX = topics["KAFKA_CONSUMER_GROUP_PREFIX"]
    NODE_ENV.update(topics)
    cluster("stop")
    cluster("start", env=NODE_ENV)


def haproxy_states() -> dict[str, str]:
    """node name -> UP / DOWN, as HAProxy's stats page says."""
    with urllib.request.urlopen("http://127.0.0.1:8404/;csv", timeout=2) as response:
        rows = response.read().decode().splitlines()
    head = rows[0].lstrip("# ").split(",")
    states = {}
    for row in rows[1:]:
        fields = dict(zip(head, row.split(","), strict=False))
        if fields.get("pxname") == "nodes" and fields.get("svname", "").startswith("node"):
            states[fields["svname"]] = fields["status"]
    return states


def redis_primary() -> int:
    """The port of the primary the Sentinels name now."""
    host, port = get_redis_connection("default").connection_pool.get_master_address()
    return int(port)


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
        request = urllib.request.Request(f"{LB}/api/orders", data=b"", method="POST", headers={
            "Authorization": f"Token {shopper.token}", "Idempotency-Key": key})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except (OSError, http.client.HTTPException):  # no answer, or one cut off by the kill: none
            return 0

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

    def orders(self) -> int:
        return (OrderItem.objects.filter(order__customer_id__in=self.ids, product_id=SKU)
                .exclude(order__status=OrderStatus.REJECTED).count())  # fmt: skip

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


def redis_cpu(redis) -> float:
    info = redis.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def sync_gate() -> None:
    """The runbook's step after a fault: the gate set from the database (no sale is running)."""
    subprocess.run([str(h.VENV_BIN / "python"), "manage.py", "flash_sale_sync", SKU], check=True, cwd=h.ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def stock_row() -> tuple[int, int]:
    return Stock.objects.filter(product_id=SKU).values_list("available", "reserved").get()


# --- the drills ---------------------------------------------------------------------------------------------------


def drill_sale(args, results: dict) -> list[tuple]:
    checks = []
    for mode in ("direct", "queue"):
        sale = Sale(units=args.units, shoppers=args.shoppers, mode=mode, clients=args.clients)
        redis = get_redis_connection("default")
        redis.config_resetstat()
        cpu = redis_cpu(redis)
        seconds = sale.run()
        orders = sale.settle()
        bad = sale.five_hundreds()
        scripts = redis.info("commandstats").get("cmdstat_evalsha", {})
        per_checkout = (redis_cpu(redis) - cpu) / args.shoppers * 1000
        results[f"sale_{mode}"] = {"seconds": round(seconds, 1), "orders": orders, "5xx": bad,
                                   "statuses": dict(sale.statuses), "scripts": scripts,
                                   "redis_cpu_ms_per_checkout": round(per_checkout, 3)}  # fmt: skip
        print(f"sale ({mode}): {args.shoppers} checkouts in {seconds:.1f} s ({args.shoppers / seconds:.0f}/s), "
              f"{orders} orders, {bad} x 5xx, statuses {dict(sorted(sale.statuses.items()))}; Redis: "
              f"{scripts.get('calls', 0)} scripts at {scripts.get('usec_per_call', 0)} us each "
              f"(one core: {1e6 / max(scripts.get('usec_per_call', 1), 1):,.0f} scripts/s), "
              f"{per_checkout:.3f} CPU ms per checkout")  # fmt: skip
        checks += [(f"sale ({mode}): exactly {args.units} orders", orders == args.units),
                   (f"sale ({mode}): 0 x 5xx", bad == 0)]  # fmt: skip
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
    consumer = Consumer(client_config(**{"group.id": "bench-cluster-probe", "enable.auto.commit": False,
                                         "enable.partition.eof": True}))  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        messages = read_to_end(consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions], timeout=10)
    finally:
        consumer.close()
    seen = Counter(json.loads(message.value())["event_id"] for message in messages)
    seen = Counter({event_id: n for event_id, n in seen.items() if event_id in event_ids})
    return sum(seen.values()), len(seen)


def node_process(node: int, command: str) -> int | None:
    """The pid of node `node`'s process running `command` (scripts/cluster.sh marks each with SHOP_NODE)."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            argv = (environ.parent / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"manage.py", command.encode()] and f"SHOP_NODE={node}".encode() in (
                environ.read_bytes().split(b"\0")
            ):
                return int(environ.parent.name)
        except OSError:  # gone, or not ours
            continue
    return None


def relay_leader(*, wait_for: str, seconds: float) -> str:
    """The process holding the relay's leader lock (its application_name) once it is `wait_for`'s and its run
    has a RelayRun row (it has events to produce), or whoever holds it after `seconds`."""
    from outbox.relay.sql import RELAY_LOCK_KEY

    deadline, holder, running = time.monotonic() + seconds, "", False
    with connection.cursor() as cursor:
        while time.monotonic() < deadline and not (holder.endswith(wait_for) and running):
            cursor.execute(
                "SELECT a.application_name, EXISTS (SELECT FROM outbox_relay_runs) FROM pg_locks l "
                "JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.granted",
                [RELAY_LOCK_KEY >> 32, RELAY_LOCK_KEY & 0xFFFFFFFF],
            )
            holder, running = cursor.fetchone() or ("", False)
    return holder


def relay_recoveries() -> list[int]:
    """Per run a relay found unfinished in the nodes' logs: how many of its events Kafka had already."""
    found = []
    for log in sorted(RUN.glob("node*.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = re.search(r"did not finish; (\d+) of its events were in Kafka already", line)
            if match:
                found.append(int(match[1]))
    return found


def drill_node(args, results: dict) -> list[tuple]:
    """As many units as shoppers: every checkout must end with its order, retried or not."""
    sale = Sale(units=args.shoppers, shoppers=args.shoppers, mode="direct", clients=args.clients)
    timings: dict = {}
    first_event = (OutboxEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    recoveries_before = len(relay_recoveries())

    def kill_midway(sale: Sale) -> None:
        while sale.done < len(sale.people) // 3:
            time.sleep(0.02)
        # At the worst moment for the events: node 1's relay first, while it leads a run that has produced,
        # then the rest of the node (kill-node takes tens of ms to find them: the run would end meanwhile).
        relay = node_process(1, "relay_outbox")
        timings["relay_leader_at_kill"] = relay_leader(wait_for="relay_outbox node 1", seconds=5)
        if relay and timings["relay_leader_at_kill"].endswith("relay_outbox node 1"):
            os.kill(relay, signal.SIGKILL)
        killed = time.monotonic()
        timings["gate_at_kill"] = gate.counters(skus=[SKU])[SKU]["remaining"]
        timings["orders_at_kill"] = sale.orders()
        cluster("kill-node", "1")
        timings["killed_after"] = sale.done
        while not haproxy_states().get("node1", "").startswith("DOWN") and time.monotonic() - killed < 30:
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
    recovered = relay_recoveries()[recoveries_before:]
    available, reserved = stock_row()
    gate_before = gate.counters(skus=[SKU])[SKU]["remaining"]
    sync_gate()
    gate_after = gate.counters(skus=[SKU])[SKU]["remaining"]
    results["node"] = {**timings, "seconds": round(seconds, 1), "statuses": dict(sale.statuses),
                       "failed_first": len(sale.failed), "retries_ended": dict(sale.retried), "orders": orders,
                       "events_waiting": waiting, "order_created": created, "warehouse_applied": applied,
                       "events_written": written, "messages_in_kafka": published, "distinct_in_kafka": distinct,
                       "unfinished_relay_runs_marked": recovered,
                       "gate_before_sync": gate_before, "gate_after_sync": gate_after,
                       "available": available}  # fmt: skip
    print(f"node 1 killed after {timings['killed_after']} checkouts (relay leader then: "
          f"{timings['relay_leader_at_kill'] or 'none'}): HAProxy marked it down in "
          f"{timings['marked_down_s']} s; {len(sale.failed)} checkouts failed first (no answer or 5xx), their "
          f"retries with the same key ended {dict(sale.retried)}; {orders} orders for {args.shoppers} shoppers; "
          f"events unpublished {waiting}, written {written}, in Kafka {published} messages of {distinct} of them "
          f"(unfinished relay runs found: {len(recovered)}, events of theirs marked from Kafka: {recovered}); "
          f"OrderCreated {created}, applied "
          f"by the warehouse {applied}; statuses "
          f"{dict(sorted(sale.statuses.items()))}; gate {gate_before} before flash_sale_sync, {gate_after} after, "
          f"{available} available")
    cluster("start-node", "1")
    return [("node: HAProxy stopped sending to the dead node within its checks (fall 2 x inter 1 s, + 1 s)",
             timings["marked_down_s"] <= 3.0),
            ("node: every retried checkout got its order, created once",
             set(sale.retried) <= {200, 201} and len(per_key) == len(sale.failed)
             and all(n == 1 for n in per_key.values())),
            (f"node: no oversell ({orders} orders + {available} available = {args.shoppers} units)",
             orders + available == args.shoppers and reserved == orders),
            ("node: gate and database equal after flash_sale_sync (units the dead node's requests had "
             "admitted come back)", gate_after == available),
            ("node: every event in Kafka, each OrderCreated applied by the warehouse once",
             waiting == 0 and distinct == written and applied == created),
            ("node: no event twice in Kafka (a relay killed between Kafka's ack and its mark: the next leader "
             "marks what Kafka has instead of publishing it again)", published == distinct)]  # fmt: skip


def drill_redis(args, results: dict) -> list[tuple]:
    sale = Sale(units=args.units, shoppers=args.shoppers, mode="direct", clients=args.clients)
    # Carts written through the API a second before the kill, by shoppers not in the sale.
    keepers = h.ensure_shoppers(50, prefix=f"{PREFIX}cart-")
    timings: dict = {}

    def put(shopper, sku: str) -> int:
        request = urllib.request.Request(f"{LB}/api/cart/items/{sku}", data=b'{"quantity": 2}', method="PUT",
                                         headers={"Authorization": f"Token {shopper.token}",
                                                  "Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    demo_sku = "MUG-001" if h.Product.objects.filter(sku="MUG-001").exists() else h.Product.objects.first().sku

    def kill_primary(sale: Sale) -> None:
        while sale.done < len(sale.people) // 3:
            time.sleep(0.02)
        timings["carts_written"] = Counter(put(k, demo_sku) for k in keepers)
        time.sleep(1.0)
        old = redis_primary()
        subprocess.run(["kill", "-9", (RUN / f"redis-{old}.pid").read_text().strip()], check=True)
        killed = time.monotonic()
        probe, deadline = keepers[0], killed + 60
        while time.monotonic() < deadline:  # a request that needs Redis, through HAProxy
            request = urllib.request.Request(f"{LB}/api/cart", headers={"Authorization": f"Token {probe.token}"})
            try:
                with urllib.request.urlopen(request, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.05)
        timings["serving_again_s"] = round(time.monotonic() - killed, 2)
        timings["new_primary"] = redis_primary()
        timings["failed_meanwhile"] = sale.five_hundreds()
        timings["old_primary"] = old

    sale.run(during=kill_primary)
    orders = sale.settle(10)
    available, reserved = stock_row()
    sync_gate()
    remaining = gate.counters(skus=[SKU])[SKU]["remaining"]
    kept = sum(1 for k in keepers if get_redis_connection("default").hget(cart_key(k.user_id), demo_sku))
    # The old primary back, as a replica of the new one (the Sentinels reconfigure it).
    old = timings["old_primary"]
    subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(old), "--save", "",
                    "--appendonly", "no", "--dir", str(RUN), "--pidfile", str(RUN / f"redis-{old}.pid"),
                    "--logfile", str(RUN / f"redis-{old}.log")], check=True)  # fmt: skip
    results["redis"] = {**{k: v for k, v in timings.items() if k != "carts_written"}, "orders": orders,
                        "statuses": dict(sale.statuses), "retries_ended": dict(sale.retried),
                        "carts_kept": kept, "stock": [available, reserved], "gate_after_sync": remaining}  # fmt: skip
    print(f"Redis primary :{old} killed: the shop served again after {timings['serving_again_s']} s "
          f"(new primary :{timings['new_primary']}); {timings['failed_meanwhile']} checkouts refused meanwhile; "
          f"{orders} orders; gate after flash_sale_sync {remaining} = available {available}; "
          f"carts kept {kept}/{len(keepers)}; statuses {dict(sorted(sale.statuses.items()))}")
    return [("redis: a replica promoted, the shop serving again without a restart",
             timings["new_primary"] != old),
            (f"redis: no oversell ({orders} <= {args.units}, available + reserved = {args.units})",
             orders <= args.units and available + reserved == args.units),
            ("redis: gate and database consistent after flash_sale_sync", remaining == available),
            ("redis: carts written a second before the kill kept", kept == len(keepers))]  # fmt: skip


def drill_beats(args, results: dict) -> list[tuple]:
    """Both nodes' beats run expiry every 5 s, publishing every second and the purge every 20 s (NODE_ENV)."""
    people = h.ensure_shoppers(200, prefix=f"{PREFIX}beat-")
    ids = [p.user_id for p in people]
    h.delete_orders(ids)
    h.ensure_products(["BENCH-BEAT"], 1_000_000)
    # Old published events for the beats' purge (every 20 s) to delete: written published, so that no relay
    # publishes them (and stamps them as new) before they are made old.
    month_ago = timezone.now() - timedelta(days=30)
    old = [event.id for event in OutboxEvent.objects.bulk_create(
        OutboxEvent(aggregate_type="bench", aggregate_id=str(n), event_type="BenchOld", payload={},
                    published_at=month_ago) for n in range(1000))]  # fmt: skip
    started = time.monotonic()
    placed = 0
    from orders.services import place_order

    while time.monotonic() - started < args.beat_minutes * 60:
        h.fill_carts([(i, {"BENCH-BEAT": 1}) for i in ids])
        for customer in ids:  # a wave of orders, due at once: the beats' expiry takes them
            place_order(customer_id=customer, idempotency_key=f"beat-{placed}-{customer}")
        Order.objects.filter(customer_id__in=ids, status=OrderStatus.PENDING_PAYMENT).update(
            expires_at=timezone.now() - timedelta(seconds=1))
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
    results["beats"] = {"placed": placed, "expired": expired, "cancel_events": cancel_events,
                        "twice": sum(1 for n in per_order.values() if n > 1), "unpublished": unpublished,
                        "reserved_left": stock, "old_events_left": old_left}  # fmt: skip
    print(f"two beats for {args.beat_minutes} min: {placed} orders placed and expired {expired} "
          f"({cancel_events} OrderCancelled, {results['beats']['twice']} twice); unpublished {unpublished}; "
          f"units still reserved {stock}; old published events left after the purges {old_left} of 1,000")
    h.delete_orders(ids)
    return [("beats: every order expired once, its stock back once", expired == placed and stock == 0
             and results["beats"]["twice"] == 0 and cancel_events == placed),
            ("beats: every event published", unpublished == 0),
            ("beats: the purge deleted the old events (two purges at once: tests/config/test_beat_on_every_node.py)",
             old_left == 0)]  # fmt: skip


DRILLS = {"sale": drill_sale, "node": drill_node, "redis": drill_redis, "beats": drill_beats}


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    lock = h.lock_or_exit(4_031, "cluster")  # noqa: F841 - held until exit
    restart_cluster()
    results, checks = {}, []
    try:
        for name in args.drills.split(","):
            checks += DRILLS[name](args, results)
    finally:
        h.delete_orders(h.user_ids(PREFIX))
        h.end_sale(SKU)
        cluster("stop")
        h.delete_topics([NODE_ENV["KAFKA_ORDERS_TOPIC"], NODE_ENV["KAFKA_ORDERS_TOPIC"] + ".dlq",
                         NODE_ENV["KAFKA_CHECKOUT_TOPIC"]])  # fmt: skip
    RUN.mkdir(parents=True, exist_ok=True)
    (RUN / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return 0 if h.print_checks(checks, "cluster drills") else 1


if __name__ == "__main__":
    if not os.environ.get("REDIS_SENTINELS"):  # the bench's own Django must reach the cluster's Redis too
        raise SystemExit("run as: REDIS_SENTINELS=127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392 "
                         "python -m bench.cluster (bench/README.md)")
    raise SystemExit(main())
