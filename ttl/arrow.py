"""Spark DataFrames read into the driver as Arrow, a partition at a time.

Below the session factory (``ttl.spark``) on purpose: the store and the publisher read
frames this way, and neither should depend on how a session is configured or started.
"""

from __future__ import annotations

from collections.abc import Iterator

from ttl.java import java_class


def arrow_batches(frame, *, prefetch: bool = True) -> Iterator:
    """A DataFrame's rows as Arrow record batches, in the frame's order, a partition at a
    time: what ``toLocalIterator`` does, without turning each row into a Python ``Row``.

    With ``prefetch`` Spark computes the next partition while this one is read (the driver
    then holds two); a caller that may stop early (a range scan) passes ``False``, and one
    that may fail midway closes the iterator, which ends the serving job.

    Why: ``toLocalIterator`` builds ~100k ``Row`` objects a second, and ``toArrow`` holds
    the whole result in the driver at once; the publisher reads change feeds (and a re-seed
    the whole table) that can be larger than the driver should hold. Measured on 1M rows of
    the changelog's shape: 1.8 s here against 14 s through ``Row``.

    Spark has no public streaming Arrow collect (PySpark 4.1), so this joins two internals
    PySpark itself uses: the JVM Dataset's Arrow batch RDD (``toArrowBatchRdd``, each
    element one IPC record-batch message, at most ``arrow.maxRecordsPerBatch`` rows) served
    partition by partition (``PythonRDD.toLocalIteratorAndServe``, the server behind
    ``toLocalIterator``). Runs on the JVM only: no Python workers. Unlike ``collect``, it
    runs outside a SQL execution (no SQL UI entry); a timestamp column would come back as
    UTC-aware values, not ``Row``'s naive local ones.
    """
    import pyarrow as pa
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.util import _local_iterator_from_socket

    session = frame.sparkSession
    schema = to_arrow_schema(frame.schema, error_on_duplicated_field_names_in_struct=True,
                             prefers_large_types=session._jconf.arrowUseLargeVarTypes())
    served = java_class(session, "org.apache.spark.api.python.PythonRDD"
                        ).toLocalIteratorAndServe(frame._jdf.toArrowBatchRdd(), prefetch)
    for message in _local_iterator_from_socket(served, NoOpSerializer()):
        yield pa.ipc.read_record_batch(pa.py_buffer(message), schema)
