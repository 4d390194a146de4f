"""The Delta store equals the reference model after every micro-batch (docs/semantics.md).

Generated operation sequences (``tests/strategies.py``) run through the real Spark path and
through ``ttl.model.ReferenceStore``; after each batch the whole table (expired-but-unswept
rows included), the counts, the dead letters and stream time must be equal. Half the
sequences draw keys from a wide pool, so the batch fold's vectorized path (one plain record
of a key) runs against the table as well as the model's path (collisions). Each Delta commit
costs seconds, so CI runs a few dozen sequences with a fixed seed and no shrinking;
``TTL_LONG=1`` runs many more.
"""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tests.strategies import CLOCKS, KEYS, WIDE_KEYS, batches, seeded_batches, semantics
from ttl import delta_log, eviction
from ttl.clock import FixedClock
from ttl.config import StoreConfig
from ttl.input_position import first_offsets, next_offsets
from ttl.model import ReferenceStore
from ttl.names import KEY_FILTER_ENABLED, KEY_FILTER_FPP
from ttl.store import DeltaStore, lookup, ordering, write
from ttl.store.fold import records_table
from ttl.timestamps import NO_TIMESTAMP

pytestmark = pytest.mark.integration

EXAMPLES = 300 if os.environ.get("TTL_LONG") else 18
STORED_EXAMPLES = 100 if os.environ.get("TTL_LONG") else 8
EXECUTOR_EXAMPLES = 60 if os.environ.get("TTL_LONG") else 7
LOOKUPS = ("delta-rs", "spark-in", "spark-join")
#: How the executors' fold finds the stored rows: the Bloom filter at its default, a
#: false-positive rate of 1 (every stored row goes to the fold: the partitions drop the
#: others), the join.
KEY_FILTERS = ("bloom", "every-row", "join")
KEY_FILTERS_FPP = {"every-row": "1"}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(sem=semantics(), clock=CLOCKS, how=st.sampled_from(LOOKUPS), replace=st.booleans(),
       plan=st.sampled_from((KEYS, WIDE_KEYS)).flatmap(
           lambda keys: batches(min_batches=1, max_batches=3, max_records=12, keys=keys)))
def test_delta_store_equals_reference_model_after_every_batch(spark, tmp_path_factory, sem,
                                                              clock, how, replace, plan):
    # Each lookup reader in turn: delta-rs, Spark's key filter, and the broadcast join a
    # large batch uses; and both writes of a batch that upserts: the replace (with or
    # without removals beside the upserts), or the MERGE every batch makes where Delta
    # has no replace (an append is a third: none of the keys stored; a batch that only
    # removes keys is always a MERGE).
    in_list = lookup.LOOKUP_IN_LIST
    lookup.LOOKUP_IN_LIST = 0 if how == "spark-join" else in_list
    write._REPLACE_SUPPORTED = None if replace else False
    try:
        _run_against_model(spark, tmp_path_factory, sem, clock, plan,
                           "delta-rs" if how == "delta-rs" else "spark")
    finally:
        lookup.LOOKUP_IN_LIST = in_list
        write._REPLACE_SUPPORTED = None


@settings(max_examples=STORED_EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(sem=semantics(), clock=CLOCKS, named=st.sampled_from((None, "delta", "positional")),
       layout=st.sampled_from(("both", None, "key_hash")),
       plan=st.sampled_from((KEYS, WIDE_KEYS[:15])).flatmap(
           lambda keys: seeded_batches(keys=keys, min_batches=1, max_batches=2,
                                       max_records=12)))
def test_batches_over_stored_keys_equal_the_reference_model(spark, tmp_path_factory, sem,
                                                            clock, named, layout, plan):
    """The same check on batches whose keys are stored (a first batch puts them all): the
    updates, removals and expiries on arrival of stored rows, which the replace (or, for a
    batch that only removes keys, the MERGE) writes; or, ``named``, the writes that name
    the batch's keys so files are skipped, taken here whatever the files' statistics say:
    Delta's (``"delta"``: ``replaceWhere``, or a MERGE whose condition names them) or
    ttl's replace by position (``"positional"``, ``ttl.store.positional``), which the
    lookup's statistics allow after a delta-rs lookup; ``None``: the default choice (the
    replace by position, also where Delta's write would be its replace). With a
    ``layout``, the stored rows are first rewritten by OPTIMIZE into small files in that
    order (``maintenance.cluster_by``),
    so the later batches' keys sit in files of narrow ranges beside the appends' wide
    ones. The test above, from an empty table, mostly appends."""
    share, group_keys = write.WRITE_PRUNE_SHARE, ordering.GROUP_KEYS
    write.WRITE_PRUNE_SHARE = 1.0 if named else share
    ordering.GROUP_KEYS = 1  # expiry groups on these small tables (2-3 files: G = 2)
    enabled = write.positional_enabled  # the store writes in a session of its own
    write.positional_enabled = lambda _spark: named != "delta"  # None: as by default
    try:
        _run_against_model(spark, tmp_path_factory, sem, clock, plan, "delta-rs", layout)
    finally:
        write.WRITE_PRUNE_SHARE, ordering.GROUP_KEYS = share, group_keys
        write.positional_enabled = enabled


@settings(max_examples=EXECUTOR_EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(sem=semantics(), clock=CLOCKS, replace=st.booleans(), aside=st.booleans(),
       by_position=st.booleans(), key_filter=st.sampled_from(KEY_FILTERS),
       plan=st.one_of(
           st.sampled_from((KEYS, WIDE_KEYS)).flatmap(
               lambda keys: batches(min_batches=1, max_batches=3, max_records=12, keys=keys)),
           st.sampled_from((KEYS, WIDE_KEYS[:15])).flatmap(
               lambda keys: seeded_batches(keys=keys, min_batches=1, max_batches=2,
                                           max_records=12))))
def test_batches_on_the_executors_equal_the_reference_model(spark, tmp_path_factory, sem,
                                                            clock, replace, aside,
                                                            by_position, key_filter, plan):
    """The same check for batches folded on the executors (``ttl.store.distributed``):
    the input as a DataFrame, the stored rows joined to it, each partition folded apart;
    the figures that reach the driver (counts, offsets) equal the driver path's. Each
    batch runs under a txn id, as the stream's, and runs again after its commit (a replay:
    nothing changes); its expired-on-arrival keys are the model's, in its metadata or,
    ``aside``, in the expired-keys table (``write.EXPIRED_KEYS_INLINE``). A replace is
    ttl's by the positions the fold found, or, not ``by_position``, Delta's. The stored
    rows are found by the Bloom filter of the batch's hashes (``key_filter``: at its
    default, or at a false-positive rate of 1, every stored row, which the partitions must
    drop but their own input's) or by the join with them."""
    inline = write.EXPIRED_KEYS_INLINE
    write._REPLACE_SUPPORTED = None if replace else False
    write.EXPIRED_KEYS_INLINE = 0 if aside else inline
    try:
        _run_against_model(spark, tmp_path_factory, sem, clock, plan, on_executors=True,
                           by_position=by_position, key_filter=key_filter)
    finally:
        write._REPLACE_SUPPORTED = None
        write.EXPIRED_KEYS_INLINE = inline


def _run_against_model(spark, tmp_path_factory, sem, clock, plan, how="auto",
                       layout: str | None = None, on_executors: bool = False,
                       by_position: bool = True, key_filter: str = "bloom") -> None:
    path = str(tmp_path_factory.mktemp("model") / uuid.uuid4().hex)
    conf = StoreConfig(name="m", path=path, lookup=how, ttl=sem.ttl,
                       late_records=sem.late_records,
                       missing_timestamp=sem.missing_timestamp, max_future=sem.max_future,
                       max_value_bytes=sem.max_value_bytes,
                       max_headers_bytes=sem.max_headers_bytes,
                       max_record_bytes=sem.max_record_bytes)
    wall = FixedClock(plan[0].wall_ms)
    store = DeltaStore(spark, conf, clock=clock, wall_clock=wall)
    store.spark.conf.set(write.POSITIONAL_ENABLED, str(by_position).lower())
    store.spark.conf.set(KEY_FILTER_ENABLED, str(key_filter != "join").lower())
    store.spark.conf.set(KEY_FILTER_FPP, KEY_FILTERS_FPP.get(key_filter, "0.01"))
    model = ReferenceStore(sem, clock)
    dead_letters: list[tuple[int, int, str]] = []
    seen: list = []  # the figures an executors' batch gave its metadata
    for number, batch in enumerate(plan):
        expected = model.apply_batch(batch.records, batch.wall_ms)
        where = f"batch {number} of {len(plan)}"
        if on_executors:
            table = records_table(batch.records)
            seen.clear()

            def run(table=table, number=number, wall_ms=batch.wall_ms):
                return store.apply_frame(spark.createDataFrame(table), wall_ms=wall_ms,
                                         txn=("model", number),
                                         metadata=lambda figures: seen.append(figures) or {})

            result = run()
            assert (seen[-1].first_offsets, seen[-1].next_offsets) == (
                first_offsets(table), next_offsets(table)), where
            if result.applied:
                meta = delta_log.commit_info(spark, path, result.version).metadata
                assert sorted(write.expired_keys(spark, path, meta)) == sorted(
                    o.key.hex() for o in expected.outcomes
                    if o.had_row and o.final is None and o.removal_op == "expire"), where
            again = run()
            assert (again.applied, again.version) == (False, result.version), where
        else:
            result = store.apply_records(batch.records, wall_ms=batch.wall_ms)
            assert not store.lookup.fell_back, "delta-rs could not read the table"
            assert not store.lookup.reads["spark" if how == "delta-rs" else "delta-rs"], how
        event(f"write: {result.write}")  # in hypothesis' statistics (--hypothesis-show-statistics)
        assert result.counts.as_dict() == expected.counts.as_dict(), where
        assert store.stream_time.value == model.stream_time.value, where
        assert store.entries(at=NO_TIMESTAMP) == model.entries, where
        dead_letters += [(r.record.partition, r.record.offset, r.reason)
                         for r in expected.rejections]
        if layout is not None and number == 0:  # no row changes: the model stays as it is
            done = eviction.optimize(store, layout, file_bytes=1024)
            event(f"layout: {layout}" + (f", {done['groups']} groups" if done else ""))
            assert store.entries(at=NO_TIMESTAMP) == model.entries, f"{layout} OPTIMIZE"
    stored = sorted((r.source_partition, r.source_offset, r.reason) for r in
                    spark.read.format("delta").load(store.dead_letter_path).collect())
    assert stored == sorted(dead_letters)  # once each, replays included
    assert DeltaStore(spark, conf, clock=clock, wall_clock=wall).stream_time.value == \
        model.stream_time.value


@settings(max_examples=max(3, EXAMPLES // 10), deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
@given(plan=batches(min_batches=2, max_batches=3, max_records=10, monotonic_wall=True),
       data=st.data())
def test_outcome_with_a_fixed_wall_clock_does_not_depend_on_batch_split(spark,
                                                                      tmp_path_factory,
                                                                      plan, data):
    """Same records, one batch vs the generated split, same fixed wall clock: same table."""
    records = [r for b in plan for r in b.records]
    conf_args = dict(ttl=10_000_000)
    tables = []
    for split in ([records], [b.records for b in plan]):
        path = str(tmp_path_factory.mktemp("split") / uuid.uuid4().hex)
        store = DeltaStore(spark, StoreConfig(name="m", path=path, **conf_args),
                           clock="wall", wall_clock=FixedClock(plan[0].wall_ms))
        for part in split:
            store.apply_records(part)
        tables.append(store.entries(at=NO_TIMESTAMP))
    assert tables[0] == tables[1]
