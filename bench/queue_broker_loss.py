"""Every 202 resolves, black-box (bench/README.md): a queue-mode sale, its broker killed and started again with an
empty log, shoppers checking out after it, and two requests made stale on purpose (one with its Redis copy evicted).

python -m bench.queue_broker_loss [--rounds 3 --shoppers 30]"""

import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django_redis import get_redis_connection

from bench import harness as h
from bench.queue_outage import start_broker
from inventory import gate
from inventory.services.flash_sales import seed_flash_sale
from orders.models import Order, OrderStatus
from orders.services.queue_admission import order_key, queue_depths

PREFIX = "BENCH-QL-"
SKU, STOCK = f"{PREFIX}FLASH", 10_000
STALE, SWEEP = 5, 1  # QUEUE_STALE_AFTER_SECONDS and QUEUE_SWEEP_SECONDS of the run's processes
WRITTEN_WITHIN = 30.0  # seconds: the goal for every 202 answered after the restart
RECOVERY = 5.0  # seconds after the broker is back within which 503 queue_unavailable is an answer (the breaker)


def checkout(server: h.Gunicorn, shopper: h.Shopper, key: str) -> tuple:
    """(status, order id, when answered: monotonic) of one checkout; an error's status is (status, its code)."""
    headers = {"Authorization": f"Token {shopper.token}", "Idempotency-Key": key}
    sent = urllib.request.Request(server.base_url + "/api/orders", data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, json.loads(response.read())["id"], time.monotonic()
    except urllib.error.HTTPError as error:
        code = json.loads(error.read() or b"{}").get("error", {}).get("code", "")
        return (error.code, code), None, time.monotonic()


def check_out_all(server: h.Gunicorn, shoppers: list[h.Shopper], tag: str, *, retry: bool = True) -> list[tuple]:
    """Every shopper's checkout, each answer; a 503 is tried again (same key) after 0.2 s, as a client would,
    for up to WRITTEN_WITHIN seconds."""
    h.fill_carts([(s.user_id, {SKU: 1, **h.SHIPS}) for s in shoppers])

    def attempts(shopper: h.Shopper) -> list[tuple]:
        answers, deadline = [checkout(server, shopper, tag)], time.monotonic() + WRITTEN_WITHIN
        while retry and answers[-1][0] == (503, "queue_unavailable") and time.monotonic() < deadline:
            time.sleep(0.2)
            answers.append(checkout(server, shopper, tag))
        return answers

    with ThreadPoolExecutor(len(shoppers)) as pool:
        return [answer for answers in pool.map(attempts, shoppers) for answer in answers]


def when_resolved(ids: list[int], seconds: float) -> dict[int, float]:
    """Per order id, when (monotonic) its order was first seen in the database, polling every 0.1 s."""
    seen: dict[int, float] = {}
    deadline = time.monotonic() + seconds
    while True:
        now = time.monotonic()
        for order_id in Order.objects.filter(id__in=[i for i in ids if i not in seen]).values_list("id", flat=True):
            seen[order_id] = now
        if len(seen) == len(ids) or now > deadline:
            return seen
        time.sleep(0.1)


def serving_again(server: h.Gunicorn, probe: h.Shopper, tag: str, seconds: float) -> list:
    """A probe shopper's checkouts (one unit each, every 0.2 s) until one is admitted again."""
    started, answers = time.monotonic(), []
    while time.monotonic() - started < seconds:
        h.fill_carts([(probe.user_id, {SKU: 1, **h.SHIPS})])
        answers.append(checkout(server, probe, f"{tag}-{len(answers)}"))
        if answers[-1][0] == 202:
            break
        time.sleep(0.2)
    return answers


def after_restart(server, shoppers, tag: str) -> tuple[list, dict[int, float], float]:
    """The shoppers' checkouts; per 202, when its order was seen written; the slowest of those, in seconds."""
    answers = check_out_all(server, shoppers, tag)
    admitted = {order_id: at for status, order_id, at in answers if status == 202}
    seen = when_resolved(list(admitted), WRITTEN_WITHIN + 5)
    return answers, seen, max((seen[i] - at for i, at in admitted.items() if i in seen), default=0.0)


def one_round(n: int, run_id: str, port: int, env: dict, shoppers: list[h.Shopper]) -> dict:
    """Warm-up; the broker restarted under a running writer, then shoppers; the writer stopped, two requests
    admitted (one's Redis copy evicted), the broker restarted again, the writer started, then shoppers."""
    redis = get_redis_connection("default")
    h.delete_orders([s.user_id for s in shoppers])
    seed_flash_sale(sku=SKU, stock=STOCK, price=999, name="Bench broker-loss item", mode="queue")
    h.ensure_shipping_and_tax([SKU])
    probe, warm, stale, groups = shoppers[0], shoppers[1:11], shoppers[11:13], shoppers[13:]
    half = len(groups) // 2
    broker = start_broker(port)
    h.queue_topic(settings.KAFKA_CHECKOUT_TOPIC)
    sweeper = [
        str(h.VENV_BIN / "celery"),
        "-A",
        "config",
        "worker",
        "-B",
        "--concurrency",
        "1",
        "--loglevel",
        "WARNING",
    ]
    sweeper += ["--schedule", f"/tmp/bench-ql-beat-{run_id}"]
    r: dict = {"answers": [], "restarts": []}
    try:
        with h.Gunicorn(env=env) as server, h.Child("worker+beat", sweeper, env, group=True):
            writer = h.queue_writer(env).start()
            r["answers"] += check_out_all(server, warm, f"ql-{run_id}-{n}-warm")
            warm_ids = [order_id for status, order_id, _ in r["answers"] if status == 202]
            h.wait_until(
                lambda: len(when_resolved(warm_ids, 0)) == len(warm_ids), 30, "warm orders not written", writer
            )

            broker.stop()  # 1. under a running writer
            broker = start_broker(port)
            r["restarts"].append(time.monotonic())
            r["answers"] += serving_again(server, probe, f"ql-{run_id}-{n}-probe1", 60)
            answers, seen, slowest = after_restart(server, groups[:half], f"ql-{run_id}-{n}-after1")

            writer.stop()  # 2. two requests stale on purpose: admitted, then lost with the broker's log
            lost = check_out_all(server, stale, f"ql-{run_id}-{n}-stale", retry=False)
            lost_ids = [order_id for _, order_id, _ in lost]
            redis.delete(order_key(lost_ids[1]))  # evicted: the sweeper has only its claim
            broker.stop()
            broker = start_broker(port)
            restarted = time.monotonic()
            r["restarts"].append(restarted)
            writer = h.queue_writer(env).start()
            r["answers"] += serving_again(server, probe, f"ql-{run_id}-{n}-probe2", 60)
            answers2, seen2, slowest2 = after_restart(server, groups[half:], f"ql-{run_id}-{n}-after2")
            resolved = when_resolved(lost_ids, STALE + 30)
            writer.stop()
        r["answers"] += answers + lost + answers2
        r["admitted"] = sum(status == 202 for status, _, _ in answers + answers2)
        r["written"] = len(seen) + len(seen2)
        r["slowest s"] = max(slowest, slowest2)
        r["stale resolved s"] = max(resolved.values(), default=restarted) - restarted
        by_id = dict(Order.objects.filter(id__in=lost_ids).values_list("id", "status"))
        reasons = dict(Order.objects.filter(id__in=lost_ids).values_list("id", "rejection_reason"))
        r["stale"] = [(by_id.get(i), reasons.get(i)) for i in lost_ids]
        r["orders"] = Order.objects.filter(items__product_id=SKU, status=OrderStatus.PENDING_PAYMENT).count()
        r["gate remaining"] = gate.counters(skus=[SKU])[SKU]["remaining"]
        r["pending"] = queue_depths().get(SKU, 0)
        return r
    finally:
        broker.stop()
        h.end_sale(SKU)


def main(argv=None) -> int:
    args = h.parse(
        argv,
        __doc__,
        "check",
        rounds=(3, "rounds"),
        shoppers=(30, "shoppers checking out after the restarts (half after each)"),
    )
    h.setup()
    run_id = uuid.uuid4().hex[:8]
    ok_rounds = []
    with h.lock_or_exit("queue_broker_loss", lambda: h.delete_orders(h.user_ids(PREFIX))):
        port = h.free_port()
        settings.KAFKA_BOOTSTRAP_SERVERS = address = f"{h.HOST}:{port}"
        topic = settings.KAFKA_CHECKOUT_TOPIC = f"bench.ql.{run_id}"  # created in each round, on its broker
        settings.KAFKA_CONSUMER_GROUP_PREFIX = f"{topic}."
        env = {
            "KAFKA_CHECKOUT_TOPIC": topic,
            "KAFKA_CONSUMER_GROUP_PREFIX": f"{topic}.",
            "KAFKA_BOOTSTRAP_SERVERS": address,
        }
        env |= {"QUEUE_STALE_AFTER_SECONDS": str(STALE), "QUEUE_SWEEP_SECONDS": str(SWEEP)}
        env |= {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/12", "RATE_LIMIT_CHECKOUT": "1000000/min"}
        shoppers = h.ensure_shoppers(13 + args.shoppers, prefix=f"{PREFIX}S")
        print(f"broker-loss drill {run_id}: QUEUE_STALE_AFTER_SECONDS {STALE}, QUEUE_SWEEP_SECONDS {SWEEP}")
        try:
            for n in range(1, args.rounds + 1):
                r = one_round(n, run_id, port, env, shoppers)
                statuses = Counter(status for status, _, _ in r["answers"])
                errors = [(status, at) for status, _, at in r["answers"] if status not in (202, 200)]
                since = [at - max(t for t in r["restarts"] if t <= at) for _, at in errors]
                unavailable = all(status == (503, "queue_unavailable") for status, _ in errors)
                window = f"last {max(since, default=0):.1f} s; {dict(statuses)}"
                checks = [
                    (
                        f"every 202 after a restart written ({r['written']} of {r['admitted']})",
                        r["written"] == r["admitted"] == args.shoppers,
                    ),
                    (f"within {WRITTEN_WITHIN:g} s (slowest {r['slowest s']:.1f} s)", r["slowest s"] <= WRITTEN_WITHIN),
                    (
                        f"5xx: 503 queue_unavailable only, within {RECOVERY:g} s of a restart ({window})",
                        unavailable and max(since, default=0) <= RECOVERY,
                    ),
                    (
                        f"stale pair resolved: {r['stale']} ({r['stale resolved s']:.1f} s after the restart)",
                        r["stale"] == [("PENDING_PAYMENT", ""), ("REJECTED", "queue_lost")],
                    ),
                    (
                        f"gate = stock - orders, units back once ({r['gate remaining']} = {STOCK} - {r['orders']})",
                        r["gate remaining"] == STOCK - r["orders"],
                    ),
                    (f"nothing pending ({r['pending']})", r["pending"] == 0),
                ]
                ok_rounds.append(h.print_checks(checks, f"round {n}"))
        finally:
            h.delete_orders(h.user_ids(PREFIX))
    print(f"\n{sum(ok_rounds)} of {len(ok_rounds)} rounds passed every check")
    return 1 if args.check and not all(ok_rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
