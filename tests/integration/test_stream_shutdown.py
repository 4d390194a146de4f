"""The stream job's shutdown path on real parts (Spark, Delta, Kafka), with a fault injected."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support import clients
from ttl.changelog import topic
from ttl.changelog.publisher import Publisher
from ttl.config import from_dict
from ttl.lease import Lease
from ttl.store import DeltaStore
from ttl.stream import StreamJob

pytestmark = pytest.mark.integration


def _stream_parts(spark, kafka, tmp_path, prefix: str):
    """A profile with its changelog topic, store and publisher (what ``ttl run`` builds)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    conf = from_dict({
        "store": {"name": name, "path": str(tmp_path / "store"), "ttl": "1h"},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": f"{name}-in",
                  "changelog_topic": name, "changelog_partitions": 2},
        "eviction": {"lease": "60s"},
        "stream": {"checkpoint": str(tmp_path / "ckpt")},
    })
    kc = clients(conf, kafka)
    topic.create(kc, conf.changelog)
    store = DeltaStore(spark, conf.store)
    return name, conf, kc, store, Publisher(spark, store.path, name, kc, conf.changelog)


def test_a_failing_publication_still_gives_back_the_lease_and_closes_the_producer(
        spark, kafka, tmp_path):
    """Reliability 13: the changelog cannot be published (injected: every publish raises,
    as a broker that went away would). The run fails with that error, not one raised while
    stopping, and it still closes its producer and gives back its lease, so the next run
    does not wait a lease period."""
    name, conf, kc, store, publisher = _stream_parts(spark, kafka, tmp_path, "sd")
    closed = []
    real_close = publisher.close

    def unreachable(*_args, **_kwargs):
        raise RuntimeError(f"injected: the brokers of {name} went away")

    def close() -> None:
        closed.append(True)
        real_close()

    publisher.publish = unreachable
    publisher.close = close
    lease = Lease(spark, store.path, duration_ms=60_000, holder=f"stream:{name}")
    job = StreamJob(conf, spark, store, kc, publisher, lease)
    with pytest.raises(RuntimeError, match="injected"):
        job.run(available_now=True)
    assert closed == [True]
    state = Lease(spark, store.path).current()
    assert state is None or state.owner is None, state  # given back, not left to lapse


def test_a_batch_publication_fenced_in_the_background_stops_the_run_with_that_error(
        spark, kafka, tmp_path):
    """A batch is published in the background while the next one runs. When that
    publication fails (here: a second publisher of the store takes over the transactional
    id, a real fencing on the broker) the run stops with the publisher's own error, the
    batch stays committed in the table (the next start publishes it), and the lease is
    given back."""
    from confluent_kafka import Producer

    from ttl import delta_log
    from ttl.errors import PublisherFenced

    name, conf, kc, store, publisher = _stream_parts(spark, kafka, tmp_path, "fb")
    kc.create_topic(conf.kafka.input_topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for i in range(5):
        producer.produce(conf.kafka.input_topic, key=b"k%d" % i, value=b"v",
                         timestamp=int(time.time() * 1000))
    producer.flush(30)
    takers: list[Publisher] = []
    real = publisher.publish_known

    def fenced_first(version, changes, until=None):
        # Another instance of this store's publisher starts: the broker fences this one.
        takers.append(Publisher(spark, store.path, name, kc, conf.changelog))
        return real(version, changes, until)

    publisher.publish_known = fenced_first
    lease = Lease(spark, store.path, duration_ms=60_000, holder=f"stream:{name}")
    job = StreamJob(conf, spark, store, kc, publisher, lease)
    with pytest.raises(PublisherFenced):
        job.run(available_now=True)
    assert takers, "the batch's publication never ran"
    assert publisher.fenced and publisher.producer is None  # dropped, not flushed or aborted
    assert job.summary.published == 0
    batch = delta_log.last_engine_commit(spark, store.path, having="input_offsets")
    assert batch is not None and batch.metadata["input_offsets"] == {"0": 5}
    assert takers[0].publish().records == 5  # the committed batch is still published
    takers[0].close()
    state = Lease(spark, store.path).current()
    assert state is None or state.owner is None, state


def test_a_stream_sweeps_lateness_is_measured_after_its_batch_and_reaches_the_metrics(
        spark, kafka, tmp_path):
    """A stream-time sweep runs inside a batch, under the store's lock; the lateness of what
    it evicted (a read of its change data, as long as the DELETE on a big table) is
    measured beside the next batches, and still reaches the metrics before the run ends."""
    from confluent_kafka import Producer

    name, conf, kc, _, publisher = _stream_parts(spark, kafka, tmp_path, "sl")
    publisher.close()
    conf = conf.model_copy(update={"eviction": conf.eviction.model_copy(
        update={"clock": "stream", "stream_interval": 0})})
    store = DeltaStore(spark, conf.store, clock="stream")
    kc.create_topic(conf.kafka.input_topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    now = int(time.time() * 1000)

    def run(records) -> StreamJob:
        for key, ts in records:
            producer.produce(conf.kafka.input_topic, key=key, value=b"v", timestamp=ts)
        producer.flush(30)
        lease = Lease(spark, store.path, duration_ms=60_000, holder=f"stream:{name}")
        publisher = Publisher(spark, store.path, name, kc, conf.changelog)
        job = StreamJob(conf, spark, store, kc, publisher, lease)
        job.run(available_now=True)  # closes the publisher
        return job

    run([(b"k%d" % i, now - 7_200_000) for i in range(3)])  # stored; stream time now - 2 h
    job = run([(b"late", now)])  # stream time moves 2 h: the three expired 1 h ago
    sample = job.metrics.registry.get_sample_value
    labels = {"store": name, "clock": "stream"}
    assert sample("ttl_evicted_total", labels) == 3
    assert sample("ttl_eviction_lateness_seconds_count", labels) == 1
    assert sample("ttl_eviction_lateness_seconds_sum", labels) == pytest.approx(3_600, abs=1)
