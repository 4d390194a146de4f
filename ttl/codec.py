"""Binary value formats shared with Kafka Streams state stores (docs/semantics.md, Binary formats).

Pure Python, no dependencies. Every layout below is what Apache Kafka 4.3.1 writes, checked
byte for byte against the real classes by ``tests/integration/test_codec_kafka_streams.py``.
Why it exists: values must move between our Delta tables and Kafka Streams stores (and their
changelogs) in both directions, and old layouts must be converted without a JVM.

Varints (``org.apache.kafka.common.utils.ByteUtils``)
-----------------------------------------------------
*Unsigned varint/varlong*: little-endian base-128 ("LEB128"). Each byte carries 7 bits of the
number, least significant group first; the high bit (0x80) is set on every byte except the
last. A 32-bit number takes 1 to 5 bytes, a 64-bit number 1 to 10.

*Varint/varlong* (what Kafka means by "varint" everywhere in this format): a signed int32
(int64) is first zigzag-encoded, ``(n << 1) ^ (n >> 31)`` (``>> 63`` for 64 bits), so small
magnitudes of either sign stay short, then written as an unsigned varint (varlong)::

    0 -> 00        -1 -> 01        1 -> 02        63 -> 7e        -64 -> 7f       64 -> 80 01
    2**31-1 -> fe ff ff ff 0f      -2**31 -> ff ff ff ff 0f
    2**63-1 -> fe ff ff ff ff ff ff ff ff 01   -2**63 -> ff ff ff ff ff ff ff ff ff 01

Reading is as lenient as Kafka's reader in one way and stricter in another: a non-minimal
encoding within the size limit (``80 00`` for 0) is accepted, as Kafka accepts it; but bits
that do not fit the type (a 5th varint byte above 0x0f, a 10th varlong byte above 0x01), which
Kafka silently drops, are rejected, and so are encodings longer than 5 (10) bytes, which Kafka
rejects too. Kafka never writes either.

KIP-258 timestamped value (``ValueAndTimestampSerializer``)
-----------------------------------------------------------
::

    [timestamp: 8 bytes, big-endian signed int64][value bytes (may be empty)]

A null value serializes to null (no bytes at all), whatever the timestamp. Any int64 is a
timestamp, negatives and ``Long.MIN_VALUE`` (``NO_TIMESTAMP``, docs/semantics.md) included.
A plain (pre-KIP-258) value is upgraded by ``TimestampedBytesStore.convertToTimestampedFormat``
with timestamp -1: ``ff ff ff ff ff ff ff ff`` + value.

Header-aware value (KIP for KAFKA-20056, ``ValueTimestampHeadersSerializer``)
----------------------------------------------------------------------------
kafka-streams 4.3.1 ships it (``org.apache.kafka.streams.state.internals.HeadersSerializer``,
``HeadersDeserializer``, ``ValueTimestampHeadersSerializer``/``Deserializer``,
``org.apache.kafka.streams.state.HeadersBytesStore``)::

    value   := [headers_size: varint][headers: headers_size bytes][timestamp: 8 bytes BE][value]
    headers := empty                                            when there are no headers
             | [count: varint] header*count                     otherwise
    header  := [key_len: varint][key: UTF-8 bytes]
               ([value_len: varint][value bytes] | [varint -1 = 01] for a null value)

All lengths are zigzag varints (``ByteUtils.writeVarint``), so a 1-byte key has length byte 02.
Empty headers cost zero bytes in the block: the whole value is then ``00`` + the KIP-258
timestamped value. Header order and duplicate keys are kept; a header value may be null. A null
value (the store's delete) serializes to null.

Legacy values are read with empty headers (the KIP's upgrade rule), by the same conversions Kafka
uses: ``HeadersBytesStore.convertToHeaderFormat`` prepends ``00`` to a timestamped value, and
``convertFromPlainToHeaderFormat`` prepends ``00`` and timestamp -1 to a plain value.

Where we are stricter than Kafka's reader (it accepts these; its writer never produces them):
a negative header count or key length, a value length below -1, bytes left over after the
last header, and a key that is not valid UTF-8 (Java would substitute U+FFFD) are errors here.
A block holding an explicit count of 0 is read, as Kafka does, as empty headers.

Errors: malformed input and out-of-range numbers raise ``CodecError``, a ``ValueError`` (and a
``TtlError``) whose message says what was wrong and at which byte offset; arguments of the
wrong type raise ``TypeError``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ttl.errors import CodecError
from ttl.timestamps import INT64_MAX, INT64_MIN, NO_TIMESTAMP  # NO_TIMESTAMP encodes like any other

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "NO_TIMESTAMP",
    "PLAIN_VALUE_TIMESTAMP",
    "CodecError",
    "Header",
    "decode_headers",
    "decode_legacy_timestamped",
    "decode_timestamped",
    "decode_value_timestamp_headers",
    "encode_headers",
    "encode_timestamped",
    "encode_value_timestamp_headers",
    "headers_format_to_timestamped",
    "plain_to_headers_format",
    "plain_to_timestamped",
    "read_unsigned_varint",
    "read_unsigned_varlong",
    "read_varint",
    "read_varlong",
    "timestamped_to_headers_format",
    "write_unsigned_varint",
    "write_unsigned_varlong",
    "write_varint",
    "write_varlong",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

#: The timestamp Kafka gives a plain value when it upgrades it to a timestamped format.
PLAIN_VALUE_TIMESTAMP = -1

TIMESTAMP_SIZE = 8
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10
_NULL_LENGTH = -1
_TIMESTAMP = struct.Struct(">q")
_BYTES_LIKE = (bytes, bytearray, memoryview)

#: One record header: a string key and a value that may be None. Lists of them keep order and
#: duplicates, as Kafka's ``Headers`` do.
Header = tuple[str, bytes | None]


# --- argument checks -------------------------------------------------------------------------


def _check_int(name: str, value: object, low: int, high: int) -> int:
    """Reject non-integers and numbers Java could not hold, instead of silently wrapping."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise CodecError(f"{name} {value} is outside [{low}, {high}]")
    return value


def _check_bytes(name: str, value: object) -> bytes:
    """Accept bytes-like values only: ``bytes(5)`` would quietly make five zero bytes."""
    if not isinstance(value, _BYTES_LIKE):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    return bytes(value)


# --- varints ---------------------------------------------------------------------------------


def _write_leb128(value: int) -> bytes:
    """The unsigned base-128 encoding shared by every varint flavour; value is >= 0."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_leb128(buf: bytes, offset: int, max_bytes: int, bits: int, kind: str) -> tuple[int, int]:
    """Decode one unsigned base-128 number of at most ``bits`` bits; returns (value, end).

    Enforces the limits in one place so truncated, too-long and too-wide input fail alike.
    """
    if offset < 0:
        raise CodecError(f"{kind} offset {offset} is negative")
    result = 0
    for i in range(max_bytes):
        pos = offset + i
        if pos >= len(buf):
            raise CodecError(f"truncated {kind}: input ends at byte {pos} inside it")
        byte = buf[pos]
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if result >> bits:
                raise CodecError(
                    f"{kind} at byte {offset} does not fit in {bits} bits "
                    f"(last byte 0x{byte:02x})"
                )
            return result, pos + 1
    raise CodecError(f"{kind} at byte {offset} is longer than {max_bytes} bytes")


def _zigzag(value: int, bits: int) -> int:
    """Map signed to unsigned so that small magnitudes of either sign get short encodings."""
    return ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)


def _unzigzag(raw: int) -> int:
    """Inverse of ``_zigzag``: even numbers are non-negative, odd ones negative."""
    return (raw >> 1) ^ -(raw & 1)


def write_unsigned_varint(value: int) -> bytes:
    """Kafka's ``ByteUtils.writeUnsignedVarint`` for a value in [0, 2**32-1].

    Java passes the same 32 bits as a signed int; here the unsigned reading is explicit.
    """
    return _write_leb128(_check_int("unsigned varint", value, 0, UINT32_MAX))


def read_unsigned_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Read an unsigned varint at ``offset``; returns (value in [0, 2**32-1], next offset)."""
    return _read_leb128(buf, offset, _MAX_VARINT_BYTES, 32, "varint")


def write_unsigned_varlong(value: int) -> bytes:
    """Kafka's ``ByteUtils.writeUnsignedVarlong`` for a value in [0, 2**64-1]."""
    return _write_leb128(_check_int("unsigned varlong", value, 0, UINT64_MAX))


def read_unsigned_varlong(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Read an unsigned varlong at ``offset``; returns (value in [0, 2**64-1], next offset)."""
    return _read_leb128(buf, offset, _MAX_VARLONG_BYTES, 64, "varlong")


def write_varint(value: int) -> bytes:
    """Kafka's ``ByteUtils.writeVarint``: a zigzag-encoded signed int32 (1 to 5 bytes)."""
    _check_int("varint", value, INT32_MIN, INT32_MAX)
    return _write_leb128(_zigzag(value, 32))


def read_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Kafka's ``ByteUtils.readVarint`` at ``offset``; returns (signed int32, next offset)."""
    raw, end = read_unsigned_varint(buf, offset)
    return _unzigzag(raw), end


def write_varlong(value: int) -> bytes:
    """Kafka's ``ByteUtils.writeVarlong``: a zigzag-encoded signed int64 (1 to 10 bytes)."""
    _check_int("varlong", value, INT64_MIN, INT64_MAX)
    return _write_leb128(_zigzag(value, 64))


def read_varlong(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Kafka's ``ByteUtils.readVarlong`` at ``offset``; returns (signed int64, next offset)."""
    raw, end = read_unsigned_varlong(buf, offset)
    return _unzigzag(raw), end


# --- KIP-258 timestamped values --------------------------------------------------------------


def encode_timestamped(value: bytes | None, ts: int) -> bytes | None:
    """8-byte big-endian ``ts`` + ``value``, as ``ValueAndTimestampSerializer`` writes it.

    None stays None: a Kafka Streams store writes a delete, not a timestamp without a value.
    """
    _check_int("timestamp", ts, INT64_MIN, INT64_MAX)
    if value is None:
        return None
    return _TIMESTAMP.pack(ts) + _check_bytes("value", value)


def decode_timestamped(raw: bytes | None) -> tuple[bytes, int] | None:
    """Split a KIP-258 value into (value, ts); None (a delete) stays None."""
    if raw is None:
        return None
    raw = _check_bytes("timestamped value", raw)
    return _read_timestamped(raw, 0, "timestamped value")


def _read_timestamped(buf: bytes, offset: int, what: str) -> tuple[bytes, int]:
    """The timestamp + value tail shared by both formats; everything after ts is the value."""
    if len(buf) - offset < TIMESTAMP_SIZE:
        raise CodecError(
            f"{what} needs an 8-byte timestamp at byte {offset}, "
            f"but only {max(len(buf) - offset, 0)} bytes are left"
        )
    (ts,) = _TIMESTAMP.unpack_from(buf, offset)
    return buf[offset + TIMESTAMP_SIZE :], ts


def plain_to_timestamped(raw: bytes | None) -> bytes | None:
    """``TimestampedBytesStore.convertToTimestampedFormat``: a plain value gets timestamp -1.

    How Kafka upgrades a pre-KIP-258 store; the engine's own backfill rule may differ.
    """
    if raw is None:
        return None
    return _TIMESTAMP.pack(PLAIN_VALUE_TIMESTAMP) + _check_bytes("plain value", raw)


# --- headers ---------------------------------------------------------------------------------


def encode_headers(headers: Sequence[Header] | None) -> bytes:
    """The serialized ``Headers`` block (``HeadersSerializer.serialize``).

    No headers give zero bytes (the KIP's optimisation for the common case); otherwise a count
    and each header in order, duplicates and None values kept.
    """
    if not headers:
        return b""
    out = bytearray(write_varint(_check_length("header count", len(headers))))
    for index, header in enumerate(headers):
        key, value = _check_header(index, header)
        out += write_varint(_check_length(f"header {index} key length", len(key)))
        out += key
        if value is None:
            out += write_varint(_NULL_LENGTH)
        else:
            out += write_varint(_check_length(f"header {index} value length", len(value)))
            out += value
    return bytes(out)


def _check_header(index: int, header: object) -> tuple[bytes, bytes | None]:
    """Validate one (key, value) pair and return its raw key and value bytes."""
    if not isinstance(header, tuple) or len(header) != 2:
        raise TypeError(f"header {index} must be a (key, value) tuple, got {header!r}")
    key, value = header
    if not isinstance(key, str):
        raise TypeError(f"header {index} key must be a str, got {type(key).__name__}")
    try:
        raw_key = key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CodecError(f"header {index} key {key!r} is not encodable as UTF-8: {exc}") from exc
    raw_value = None if value is None else _check_bytes(f"header {index} value", value)
    return raw_key, raw_value


def _check_length(name: str, length: int) -> int:
    """Java sizes are ints: anything longer could not be read back by Kafka."""
    if length > INT32_MAX:
        raise CodecError(f"{name} {length} exceeds {INT32_MAX}")
    return length


def decode_headers(block: bytes) -> list[Header]:
    """Parse a headers block (``HeadersDeserializer.deserialize``) into (key, value) pairs.

    The whole block must be consumed, so a wrong ``headers_size`` is caught here rather than
    silently shifting the timestamp.
    """
    block = _check_bytes("headers block", block)
    if not block:
        return []
    count, pos = read_varint(block, 0)
    if count < 0:
        raise CodecError(f"header count {count} is negative")
    headers: list[Header] = []
    for index in range(count):
        key, pos = _read_header_key(block, pos, index)
        value, pos = _read_header_value(block, pos, index)
        headers.append((key, value))
    if pos != len(block):
        raise CodecError(
            f"headers block has {len(block) - pos} bytes left after its {count} headers "
            f"(at byte {pos} of {len(block)})"
        )
    return headers


def _read_header_key(block: bytes, pos: int, index: int) -> tuple[str, int]:
    """Read one length-prefixed UTF-8 key; returns (key, next position)."""
    length, pos = read_varint(block, pos)
    if length < 0:
        raise CodecError(f"header {index} key length {length} is negative")
    raw, pos = _take(block, pos, length, f"header {index} key")
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError as exc:
        raise CodecError(f"header {index} key is not valid UTF-8: {exc}") from exc


def _read_header_value(block: bytes, pos: int, index: int) -> tuple[bytes | None, int]:
    """Read one length-prefixed value, where length -1 means None."""
    length, pos = read_varint(block, pos)
    if length == _NULL_LENGTH:
        return None, pos
    if length < 0:
        raise CodecError(f"header {index} value length {length} is below -1")
    return _take(block, pos, length, f"header {index} value")


def _take(buf: bytes, pos: int, length: int, what: str) -> tuple[bytes, int]:
    """Slice exactly ``length`` bytes or fail: Python slicing would quietly return fewer."""
    end = pos + length
    if end > len(buf):
        raise CodecError(
            f"truncated {what}: needs {length} bytes at byte {pos}, only {len(buf) - pos} left"
        )
    return buf[pos:end], end


# --- header-aware values ---------------------------------------------------------------------


def encode_value_timestamp_headers(
    value: bytes | None, ts: int, headers: Sequence[Header] | None
) -> bytes | None:
    """``ValueTimestampHeadersSerializer``: headers_size, headers, then the KIP-258 value.

    None stays None, like Kafka's serializer for a null value.
    """
    timestamped = encode_timestamped(value, ts)
    if timestamped is None:
        return None
    block = encode_headers(headers)
    return write_varint(len(block)) + block + timestamped


def decode_value_timestamp_headers(
    raw: bytes | None,
) -> tuple[bytes, int, list[Header]] | None:
    """Split a header-aware value into (value, ts, headers); None (a delete) stays None."""
    if raw is None:
        return None
    raw = _check_bytes("header-aware value", raw)
    block, pos = _read_headers_block(raw)
    headers = decode_headers(block)
    value, ts = _read_timestamped(raw, pos, "header-aware value")
    return value, ts, headers


def _read_headers_block(raw: bytes) -> tuple[bytes, int]:
    """Read ``headers_size`` and the block it announces; returns (block, payload offset).

    Kept apart so callers that only want the payload can skip the headers unparsed (the
    KIP's lazy deserialization).
    """
    if not raw:
        raise CodecError("header-aware value is empty: it needs at least a headers_size byte")
    size, pos = read_varint(raw, 0)
    if size < 0:
        raise CodecError(f"headers_size {size} is negative")
    return _take(raw, pos, size, "headers block")


def headers_format_to_timestamped(raw: bytes | None) -> bytes | None:
    """Drop the headers, keeping the KIP-258 value (``Utils.rawTimestampedValue``).

    For writing back to stores or readers that predate headers; the headers are not parsed.
    """
    if raw is None:
        return None
    raw = _check_bytes("header-aware value", raw)
    _, pos = _read_headers_block(raw)
    if len(raw) - pos < TIMESTAMP_SIZE:
        raise CodecError(
            f"header-aware value needs an 8-byte timestamp at byte {pos}, "
            f"but only {len(raw) - pos} bytes are left"
        )
    return raw[pos:]


def timestamped_to_headers_format(raw: bytes | None) -> bytes | None:
    """``HeadersBytesStore.convertToHeaderFormat``: a KIP-258 value gets empty headers.

    Prepends ``headers_size`` 0; the input is not validated, exactly like Kafka's helper.
    """
    if raw is None:
        return None
    return b"\x00" + _check_bytes("timestamped value", raw)


def plain_to_headers_format(raw: bytes | None) -> bytes | None:
    """``HeadersBytesStore.convertFromPlainToHeaderFormat``: empty headers, timestamp -1."""
    if raw is None:
        return None
    return b"\x00" + _TIMESTAMP.pack(PLAIN_VALUE_TIMESTAMP) + _check_bytes("plain value", raw)


def decode_legacy_timestamped(raw: bytes | None) -> tuple[bytes, int, list[Header]] | None:
    """Read a KIP-258 value as a header-aware one with empty headers (the KIP's upgrade rule)."""
    decoded = decode_timestamped(raw)
    if decoded is None:
        return None
    value, ts = decoded
    return value, ts, []
