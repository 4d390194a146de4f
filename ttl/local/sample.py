"""A sample-input generator for the embedded default and demos (``ttl produce-sample``).

It writes what a real input topic carries, including the awkward parts: out-of-order event
times (``ttl.ts``), timestamps before 1970, per-record TTLs, deletes (null values), user
headers with duplicates and null values, and a small share of invalid records (a malformed
``ttl.ttl``) that end up in the dead-letter table.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from ttl.clock import Clock, WallClock
from ttl.kafka import KafkaClients
from ttl.names import HEADER_TS, HEADER_TTL


@dataclass(frozen=True)
class SampleSpec:
    keys: int = 200
    records: int = 2_000
    rate: float = 200.0  # records per second
    out_of_order: float = 0.05
    negative: float = 0.02
    deletes: float = 0.05
    invalid: float = 0.01
    record_ttl: float = 0.05
    seed: int = 42


def sample_record(rng: random.Random, spec: SampleSpec, i: int, now_ms: int):
    """(key, value, headers, kafka timestamp) of the i-th sample record."""
    key = f"user-{rng.randrange(spec.keys)}".encode()
    value = None if rng.random() < spec.deletes else f'{{"n": {i}}}'.encode()
    headers: list[tuple[str, bytes | None]] = [("source", b"sample"), ("trace", None)]
    roll = rng.random()
    if roll < spec.negative:
        headers.append((HEADER_TS, str(-rng.randrange(1, 10**12)).encode()))
    elif roll < spec.negative + spec.out_of_order:
        headers.append((HEADER_TS, str(now_ms - rng.randrange(1, 10_000)).encode()))
    if rng.random() < spec.record_ttl:
        headers.append((HEADER_TTL, str(rng.randrange(1_000, 60_000)).encode()))
    if rng.random() < spec.invalid:
        headers.append((HEADER_TTL, b"not-a-number"))
    if rng.random() < 0.1:
        headers.append(("source", b"duplicate-header"))
    return key, value, headers, now_ms


def produce(kafka: KafkaClients, spec: SampleSpec, *, clock: Clock | None = None,
            stop: threading.Event | None = None) -> int:
    """Produce ``spec.records`` records at ``spec.rate``/s into the profile's input topic;
    returns how many were sent."""
    clock = clock or WallClock()
    rng = random.Random(spec.seed)
    topic = kafka.conf.input_topic
    producer = kafka.producer(**{"linger.ms": 10})
    started = time.monotonic()
    sent = 0
    for i in range(spec.records):
        if stop is not None and stop.is_set():
            break
        key, value, headers, ts = sample_record(rng, spec, i, clock.now_ms())
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts)
        sent += 1
        producer.poll(0)
        pause = started + sent / spec.rate - time.monotonic()
        if pause > 0:  # pacing the producer to the requested rate
            time.sleep(pause)
    producer.flush(30)
    return sent
