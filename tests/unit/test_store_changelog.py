"""``ttl.codec.decode_store_changelog``: a Kafka Streams store's changelog records as a
restore's converted rows (pure: pyarrow, no JVM)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ttl import codec

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def _records(values, headers=None):
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([b"k%d" % i for i in range(n)], pa.binary()), pa.array(values, pa.binary()),
         pa.array(headers or [[] for _ in range(n)], pa.list_(HEADER)),
         pa.array([0] * n, pa.int32()), pa.array(range(10, 10 + n), pa.int64()),
         pa.array([99] * n, pa.int64())],
        names=["key", "value", "headers", "partition", "offset", "append_ts"])


def test_timestamped_values_give_their_own_timestamp_and_keep_the_records_headers():
    values = [codec.encode_timestamped(b"v", -5), None, codec.encode_timestamped(b"", 7)]
    own = [[{"key": "r", "value": b"1"}], [], []]
    (out,) = codec.decode_store_changelog([_records(values, own)], with_headers=False)
    assert out.column("value").to_pylist() == [b"v", None, b""]
    assert out.column("ts").to_pylist() == [-5, 99, 7]  # a delete keeps the record's time
    assert out.column("headers").to_pylist()[0] == [{"key": "r", "value": b"1"}]
    assert out.column("version").null_count == 3 and out.column("offset").to_pylist()[0] == 10


def test_header_aware_values_give_their_headers_in_order_with_nulls():
    raw = codec.encode_value_timestamp_headers(b"x", 3, [("a", b"1"), ("a", None)])
    (out,) = codec.decode_store_changelog([_records([raw])], with_headers=True)
    assert out.to_pylist()[0] | {"key": None} == {
        "key": None, "value": b"x", "ts": 3, "record_ttl": None, "version": None,
        "stream_time": None, "partition": 0, "offset": 10, "append_ts": 99,
        "headers": [{"key": "a", "value": b"1"}, {"key": "a", "value": None}]}


def test_a_value_not_in_the_format_names_its_record():
    with pytest.raises(codec.CodecError, match=r"ttl-restore-bad-value:0:11: .*8-byte"):
        list(codec.decode_store_changelog(
            [_records([codec.encode_timestamped(b"ok", 1), b"\x01\x02"])], with_headers=False))
