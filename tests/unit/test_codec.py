"""``ttl.codec`` without a JVM: literal vectors, round-trip properties and error cases.

The vectors were written by Kafka 4.3.1 (``ByteUtils``, ``ValueAndTimestampSerializer``,
``ValueTimestampHeadersSerializer``); ``tests/integration/test_codec_kafka_streams.py``
re-checks them and many more against the real classes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttl import codec
from ttl.codec import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, NO_TIMESTAMP, CodecError
from ttl.errors import TtlError

int32 = st.integers(INT32_MIN, INT32_MAX)
int64 = st.integers(INT64_MIN, INT64_MAX)
# Edges are drawn far more often than a plain integers() strategy would draw them.
timestamps = st.one_of(
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]),
    st.integers(-(2**40), 2**40),
    int64,
)
values = st.binary(max_size=300)
header_keys = st.one_of(st.sampled_from(["", "k", "ttl.ts", "ключ", "🔑", "日本"]), st.text())
header_values = st.one_of(st.none(), st.binary(max_size=200))
headers_lists = st.lists(st.tuples(header_keys, header_values), max_size=12)


# --- known vectors -----------------------------------------------------------------------------

VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (64, "8001"),
    (2**31, "8080808010"),
    (-(2**31) - 1, "8180808010"),
    (1_700_000_000_000, "80a0abfef962"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]
UNSIGNED_VARINT_VECTORS = [(0, "00"), (127, "7f"), (128, "8001"), (2**32 - 1, "ffffffff0f")]
UNSIGNED_VARLONG_VECTORS = [(0, "00"), (2**63, "80808080808080808001"),
                            (2**64 - 1, "ffffffffffffffffff01")]


@pytest.mark.parametrize(("value", "hexed"), VARINT_VECTORS)
def test_varint_vectors(value: int, hexed: str) -> None:
    assert codec.write_varint(value).hex() == hexed
    assert codec.read_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


@pytest.mark.parametrize(("value", "hexed"), VARLONG_VECTORS)
def test_varlong_vectors(value: int, hexed: str) -> None:
    assert codec.write_varlong(value).hex() == hexed
    assert codec.read_varlong(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


def test_unsigned_vectors() -> None:
    for value, hexed in UNSIGNED_VARINT_VECTORS:
        assert codec.write_unsigned_varint(value).hex() == hexed
        assert codec.read_unsigned_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)
    for value, hexed in UNSIGNED_VARLONG_VECTORS:
        assert codec.write_unsigned_varlong(value).hex() == hexed
        assert codec.read_unsigned_varlong(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


def test_read_varint_at_offset_returns_next_offset() -> None:
    buf = bytes.fromhex("ff" "7e" "8001" "01")
    assert codec.read_varint(buf, 1) == (63, 2)
    assert codec.read_varint(buf, 2) == (64, 4)
    assert codec.read_varint(buf, 4) == (-1, 5)


def test_non_minimal_varint_is_read_as_kafka_reads_it() -> None:
    assert codec.read_varint(bytes.fromhex("8000")) == (0, 2)
    assert codec.read_varint(bytes.fromhex("8180808000")) == (-1, 5)


TIMESTAMPED_VECTORS = [
    (b"", 0, "0000000000000000"),
    (b"ab", 1, "00000000000000016162"),
    (b"ab", -1, "ffffffffffffffff6162"),
    (b"v", NO_TIMESTAMP, "800000000000000076"),
    (b"v", INT64_MAX, "7fffffffffffffff76"),
    (b"\x00", 1_700_000_000_000, "0000018bcfe5680000"),
]


@pytest.mark.parametrize(("value", "ts", "hexed"), TIMESTAMPED_VECTORS)
def test_timestamped_vectors(value: bytes, ts: int, hexed: str) -> None:
    raw = codec.encode_timestamped(value, ts)
    assert raw is not None and raw.hex() == hexed
    assert codec.decode_timestamped(bytes.fromhex(hexed)) == (value, ts)


HEADER_VECTORS = [
    # empty headers cost zero bytes: headers_size 0, then the KIP-258 value
    (b"ab", 1, [], "00" "0000000000000001" "6162"),
    # one header with a null value: size 4 = count 1 (02), key len 1 (02) "k", null (01)
    (b"", -1, [("k", None)], "08" "02" "02" "6b" "01" "ffffffffffffffff"),
    # empty key, empty value
    (b"v", 0, [("", b"")], "06" "02" "00" "00" "0000000000000000" "76"),
    # order and duplicates kept; UTF-8 key "é" is 2 bytes (length 04)
    (b"ab", -2, [("k", None), ("é", b"x"), ("k", b"")],
     "18" "06" "026b01" "04c3a90278" "026b00" "fffffffffffffffe" "6162"),
]


@pytest.mark.parametrize(("value", "ts", "headers", "hexed"), HEADER_VECTORS)
def test_value_timestamp_headers_vectors(
    value: bytes, ts: int, headers: list[codec.Header], hexed: str
) -> None:
    raw = codec.encode_value_timestamp_headers(value, ts, headers)
    assert raw is not None and raw.hex() == hexed
    assert codec.decode_value_timestamp_headers(bytes.fromhex(hexed)) == (value, ts, headers)


def test_headers_block_vectors() -> None:
    assert codec.encode_headers([]) == b""
    assert codec.encode_headers(None) == b""
    assert codec.encode_headers([("k", None)]).hex() == "02026b01"
    assert codec.decode_headers(b"") == []
    assert codec.decode_headers(b"\x00") == []  # an explicit count of 0, as Kafka reads it


def test_legacy_conversions() -> None:
    assert codec.plain_to_timestamped(b"ab") == bytes.fromhex("ffffffffffffffff6162")
    assert codec.plain_to_headers_format(b"ab") == bytes.fromhex("00ffffffffffffffff6162")
    timestamped = bytes.fromhex("00000000000000056162")
    assert codec.timestamped_to_headers_format(timestamped) == b"\x00" + timestamped
    assert codec.decode_legacy_timestamped(timestamped) == (b"ab", 5, [])
    for convert in (codec.plain_to_timestamped, codec.plain_to_headers_format,
                    codec.timestamped_to_headers_format, codec.headers_format_to_timestamped):
        assert convert(None) is None


def test_none_value_is_a_delete_in_every_format() -> None:
    assert codec.encode_timestamped(None, 5) is None
    assert codec.encode_value_timestamp_headers(None, 5, [("k", b"v")]) is None
    assert codec.decode_timestamped(None) is None
    assert codec.decode_value_timestamp_headers(None) is None
    assert codec.decode_legacy_timestamped(None) is None


# --- round-trip properties ---------------------------------------------------------------------


@given(int32)
def test_varint_round_trip(value: int) -> None:
    raw = codec.write_varint(value)
    assert 1 <= len(raw) <= 5
    assert codec.read_varint(raw) == (value, len(raw))


@given(int64)
def test_varlong_round_trip(value: int) -> None:
    raw = codec.write_varlong(value)
    assert 1 <= len(raw) <= 10
    assert codec.read_varlong(raw) == (value, len(raw))


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_unsigned_round_trip(small: int, big: int) -> None:
    raw = codec.write_unsigned_varint(small)
    assert codec.read_unsigned_varint(raw) == (small, len(raw))
    raw = codec.write_unsigned_varlong(big)
    assert codec.read_unsigned_varlong(raw) == (big, len(raw))


@given(int32)
def test_varint_and_varlong_agree_on_int32(value: int) -> None:
    assert codec.write_varint(value) == codec.write_varlong(value)


@given(values, timestamps)
def test_timestamped_round_trip(value: bytes, ts: int) -> None:
    raw = codec.encode_timestamped(value, ts)
    assert raw is not None and len(raw) == 8 + len(value)
    assert codec.decode_timestamped(raw) == (value, ts)


@settings(max_examples=300)
@given(values, timestamps, headers_lists)
def test_value_timestamp_headers_round_trip(
    value: bytes, ts: int, headers: list[codec.Header]
) -> None:
    raw = codec.encode_value_timestamp_headers(value, ts, headers)
    assert raw is not None
    assert codec.decode_value_timestamp_headers(raw) == (value, ts, headers)
    # Dropping the headers leaves exactly the KIP-258 value.
    assert codec.headers_format_to_timestamped(raw) == codec.encode_timestamped(value, ts)


@given(values, timestamps)
def test_empty_headers_are_the_legacy_value_plus_one_zero_byte(value: bytes, ts: int) -> None:
    timestamped = codec.encode_timestamped(value, ts)
    raw = codec.encode_value_timestamp_headers(value, ts, [])
    assert raw == codec.timestamped_to_headers_format(timestamped)
    assert codec.decode_legacy_timestamped(timestamped) == (value, ts, [])


@given(headers_lists)
def test_headers_round_trip(headers: list[codec.Header]) -> None:
    assert codec.decode_headers(codec.encode_headers(headers)) == headers


@given(values, timestamps, headers_lists)
def test_encoding_accepts_bytearray_and_memoryview(
    value: bytes, ts: int, headers: list[codec.Header]
) -> None:
    as_views = [(k, None if v is None else memoryview(v)) for k, v in headers]
    expected = codec.encode_value_timestamp_headers(value, ts, headers)
    assert codec.encode_value_timestamp_headers(bytearray(value), ts, as_views) == expected


@given(st.binary(max_size=40))
def test_decoding_garbage_never_raises_anything_but_codec_error(raw: bytes) -> None:
    for decode in (codec.decode_value_timestamp_headers, codec.decode_timestamped,
                   codec.decode_headers, codec.headers_format_to_timestamped):
        try:
            decode(raw)
        except CodecError:
            pass


# --- errors ------------------------------------------------------------------------------------


def test_codec_error_is_a_value_error_and_a_ttl_error() -> None:
    assert issubclass(CodecError, ValueError)
    assert issubclass(CodecError, TtlError)


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, 2**40])
def test_varint_rejects_out_of_range(value: int) -> None:
    with pytest.raises(CodecError, match=r"varint .* is outside"):
        codec.write_varint(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varlong_rejects_out_of_range(value: int) -> None:
    with pytest.raises(CodecError, match="outside"):
        codec.write_varlong(value)


def test_unsigned_rejects_negative_and_too_big() -> None:
    for bad in (-1, 2**32):
        with pytest.raises(CodecError):
            codec.write_unsigned_varint(bad)
    for bad in (-1, 2**64):
        with pytest.raises(CodecError):
            codec.write_unsigned_varlong(bad)


@pytest.mark.parametrize("ts", [INT64_MAX + 1, INT64_MIN - 1])
def test_timestamp_out_of_int64_is_rejected(ts: int) -> None:
    with pytest.raises(CodecError, match="timestamp"):
        codec.encode_timestamped(b"v", ts)
    with pytest.raises(CodecError, match="timestamp"):
        codec.encode_value_timestamp_headers(b"v", ts, [])


@pytest.mark.parametrize(
    ("hexed", "message"),
    [
        ("", "truncated varint"),
        ("80", "truncated varint"),
        ("ffffff", "truncated varint"),
        ("808080808001", "longer than 5 bytes"),
        ("ffffffff1f", "does not fit in 32 bits"),
    ],
)
def test_read_varint_rejects_malformed(hexed: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        codec.read_varint(bytes.fromhex(hexed))


@pytest.mark.parametrize(
    ("hexed", "message"),
    [
        ("", "truncated varlong"),
        ("ff" * 9, "truncated varlong"),
        ("80" * 10 + "01", "longer than 10 bytes"),
        ("ff" * 9 + "02", "does not fit in 64 bits"),
    ],
)
def test_read_varlong_rejects_malformed(hexed: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        codec.read_varlong(bytes.fromhex(hexed))


def test_read_varint_rejects_negative_offset() -> None:
    with pytest.raises(CodecError, match="negative"):
        codec.read_varint(b"\x00", -1)


@pytest.mark.parametrize("hexed", ["", "00", "00000000000000"])
def test_decode_timestamped_rejects_short_input(hexed: str) -> None:
    with pytest.raises(CodecError, match="8-byte timestamp"):
        codec.decode_timestamped(bytes.fromhex(hexed))


@pytest.mark.parametrize(
    ("hexed", "message"),
    [
        ("", "empty"),
        ("00" + "00" * 7, "8-byte timestamp"),
        ("03" + "00" * 8, "headers_size -2 is negative"),
        ("20" + "00" * 8, "truncated headers block"),
        ("0802" "0a" "6162" + "00" * 8, "truncated header 0 key"),
        ("0a02" "026b" "0661" + "00" * 8, "truncated header 0 value"),
        ("0201" + "00" * 8, "header count -1 is negative"),
        ("0602" "01" "00" + "00" * 8, "key length -1 is negative"),
        ("0602" "00" "03" + "00" * 8, "value length -2 is below -1"),
        ("0802" "00" "01" "00" + "00" * 8, "1 bytes left after its 1 headers"),
        ("0802" "02" "ff" "01" + "00" * 8, "not valid UTF-8"),
        ("ffffffff1f" + "00" * 8, "does not fit in 32 bits"),
    ],
)
def test_decode_value_timestamp_headers_rejects_malformed(hexed: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        codec.decode_value_timestamp_headers(bytes.fromhex(hexed))


def test_headers_format_to_timestamped_rejects_short_payload() -> None:
    with pytest.raises(CodecError, match="8-byte timestamp"):
        codec.headers_format_to_timestamped(b"\x00\x01")


def test_unencodable_header_key_is_rejected() -> None:
    with pytest.raises(CodecError, match="not encodable as UTF-8"):
        codec.encode_headers([("\ud800", b"v")])


@pytest.mark.parametrize(
    "headers",
    [
        [("k", "text")],  # str value
        [(b"k", b"v")],  # bytes key
        [("k",)],  # not a pair
        ["kv"],  # not a tuple
        [("k", 5)],  # bytes(5) would silently be five zero bytes
    ],
)
def test_bad_header_types_are_type_errors(headers: list) -> None:
    with pytest.raises(TypeError, match="header 0"):
        codec.encode_headers(headers)


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_non_int_numbers_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError, match="must be an int"):
        codec.write_varint(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an int"):
        codec.encode_timestamped(b"v", bad)  # type: ignore[arg-type]


def test_non_bytes_value_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="value must be bytes"):
        codec.encode_timestamped("text", 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value must be bytes"):
        codec.encode_value_timestamp_headers(7, 0, [])  # type: ignore[arg-type]
