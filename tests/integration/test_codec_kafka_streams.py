"""``ttl.codec`` against Kafka's real classes (kafka-streams / kafka-clients 4.3.1), byte for byte.

A small Java program (``tests/integration/java/StreamsBytes.java``) is compiled once for the
module and run once with every case on stdin; it answers with the bytes Kafka's serializers
write and the fields its deserializers read. Each test then compares one case both ways:
Python's bytes equal Kafka's, and each side decodes the other's bytes to the original fields.

Classes compared: ``org.apache.kafka.common.utils.ByteUtils`` (write/read varint, varlong and
the unsigned forms), ``org.apache.kafka.streams.state.internals.ValueAndTimestampSerializer``
and ``...Deserializer`` (via ``ValueAndTimestampSerde`` over ``Serdes.ByteArray()``),
``...internals.ValueTimestampHeadersSerializer`` and ``...Deserializer`` (via
``ValueTimestampHeadersSerde``), ``...internals.HeadersSerializer``,
``org.apache.kafka.streams.state.TimestampedBytesStore.convertToTimestampedFormat``,
``org.apache.kafka.streams.state.HeadersBytesStore.convertToHeaderFormat`` and
``convertFromPlainToHeaderFormat``, and ``...internals.Utils.rawTimestampedValue``.

No skipping: without Java or the resolved jars the module fails and says what to install.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from ttl import codec
from ttl.codec import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, Header
from ttl.jvm import jars

pytestmark = pytest.mark.integration

JAVA_SOURCE = Path(__file__).parent / "java" / "StreamsBytes.java"
KAFKA_CLASSES = (
    "org.apache.kafka.streams.state.internals.ValueAndTimestampSerializer",
    "org.apache.kafka.streams.state.internals.ValueTimestampHeadersSerializer",
    "org.apache.kafka.streams.state.internals.HeadersSerializer",
)

Request = tuple[str, ...]
Answer = tuple[str, ...]


# --- cases -------------------------------------------------------------------------------------

VARINTS = [0, -1, 1, 63, -64, 64, -65, 127, 128, 8191, -8192, 8192, 2**20, -(2**27),
           2**28, INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1]
VARLONGS = [0, -1, 1, 2**31, -(2**31) - 1, 2**35, -(2**49), 2**56, 2**62, -(2**62) - 1,
            INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 1_700_000_000_000]
UNSIGNED_VARINTS = [0, 127, 128, 2**31, 2**32 - 1]
UNSIGNED_VARLONGS = [0, 2**63, 2**64 - 1]

TIMESTAMPED: list[tuple[bytes | None, int]] = [
    (b"", 0),
    (b"v", -1),
    (b"\x00\xff", INT64_MIN),
    (b"x" * 300, INT64_MAX),
    (b"abc", -1_234_567_890_123),
    (bytes(range(256)), 1_700_000_000_000),
    (None, 5),
    (None, INT64_MIN),
]

VALUE_TIMESTAMP_HEADERS: list[tuple[bytes | None, int, list[Header]]] = [
    (b"v", 1, []),
    (b"", 0, []),
    (b"", INT64_MIN, [("k", None)]),
    (b"v", -1, [("", b"")]),
    (b"v", INT64_MAX, [("", None)]),
    (b"dup", 42, [("k", b"1"), ("k", b"2"), ("k", None), ("k", b"1")]),
    (b"\x00", -86_400_000, [("ключ", b"\x00"), ("🔑", b"v"), ("é", None), ("日本", b"")]),
    (b"big", 7, [("blob", bytes(range(256)) * 40)]),  # headers_size takes 3 bytes
    (b"many", 8, [(f"h{i}", bytes([i])) for i in range(100)]),  # count takes 2 bytes
    (b"engine", 1_700_000_000_123, [
        ("user", b"x"), ("ttl.ts", b"-5"), ("ttl.op", b"put"), ("ttl.version", b"12"),
        ("ttl.stream-time", b"1700000000000"), ("ttl.ttl", b"60000"),
    ]),
    (None, 3, [("k", b"v")]),
    (None, 3, []),
]


def _random_vth_cases(count: int, seed: int) -> list[tuple[bytes, int, list[Header]]]:
    """Deterministic random cases: keys from a mixed alphabet, values of any length or None."""
    rng = random.Random(seed)
    alphabet = "aZ0._-é€ключ🔑\u0000 "
    cases = []
    for _ in range(count):
        headers: list[Header] = []
        for _ in range(rng.randrange(0, 6)):
            key = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))
            value = None if rng.random() < 0.25 else rng.randbytes(rng.randrange(0, 90))
            headers.append((key, value))
        ts = rng.choice([rng.randrange(INT64_MIN, INT64_MAX + 1), rng.randrange(-1000, 1000)])
        cases.append((rng.randbytes(rng.randrange(0, 70)), ts, headers))
    return cases


VALUE_TIMESTAMP_HEADERS += _random_vth_cases(20, seed=20056)
VTH_IDS = [
    f"{i}-{'null' if v is None else len(v)}B-ts{ts}-{len(h)}headers"
    for i, (v, ts, h) in enumerate(VALUE_TIMESTAMP_HEADERS)
]
TS_IDS = [f"{'null' if v is None else len(v)}B-ts{ts}" for v, ts in TIMESTAMPED]

CONVERSIONS: list[bytes] = [b"", b"v", bytes(range(40))]

# Inputs Kafka's readers reject; ttl.codec must reject them too.
BAD_HEADER_VALUES = [
    b"",  # no headers_size
    b"\x00" + b"\x00" * 7,  # timestamp one byte short
    b"\x02\x00",  # empty block, then no timestamp
    b"\x08\x02\x0aab",  # key announces 5 bytes, 2 follow
    b"\x0a\x02\x02k\x06a" + b"\x00" * 8,  # header value announces 3 bytes, 1 follows
    b"\x20\x00" + b"\x00" * 8,  # headers_size 16, only 9 bytes follow
    b"\x03" + b"\x00" * 8,  # headers_size -2
]
# Malformed values Kafka's deserializer reads anyway (its writer never produces them); ttl.codec
# rejects them, as its module docstring says.
LENIENT_IN_KAFKA = [
    b"\x08\x02\x00\x01\x00" + b"\x00" * 8,  # one header ("", None), then a stray byte
    b"\x02\x01" + b"\x00" * 8,  # header count -1
]
BAD_VARINTS = [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80\x80\x01"]
BAD_VARLONGS = [b"", b"\xff" * 9, b"\x80" * 10 + b"\x01"]
# Non-minimal but within the size limit: Kafka accepts them and so do we.
NON_MINIMAL_VARINTS = [b"\x80\x00", b"\x81\x80\x80\x80\x00", b"\xfe\xff\xff\xff\x0f"]


def _hex(raw: bytes | None) -> str:
    return "-" if raw is None else raw.hex()


def _unhex(field: str) -> bytes | None:
    return None if field == "-" else bytes.fromhex(field)


def _header_fields(headers: Sequence[Header]) -> tuple[str, ...]:
    return tuple(f for key, value in headers for f in (key.encode("utf-8").hex(), _hex(value)))


def _vth_request(value: bytes | None, ts: int, headers: Sequence[Header]) -> Request:
    return ("vth", _hex(value), str(ts), *_header_fields(headers))


def _all_requests() -> list[Request]:
    """Every line the Java helper answers, so one JVM run serves the whole module."""
    reqs: list[Request] = []
    reqs += [("varint", str(v)) for v in VARINTS]
    reqs += [("varlong", str(v)) for v in VARLONGS]
    reqs += [("uvarint", str(v)) for v in UNSIGNED_VARINTS]
    reqs += [("uvarlong", str(v)) for v in UNSIGNED_VARLONGS]
    reqs += [("readvarint", codec.write_varint(v).hex()) for v in VARINTS]
    reqs += [("readvarlong", codec.write_varlong(v).hex()) for v in VARLONGS]
    reqs += [("readvarint", raw.hex()) for raw in BAD_VARINTS + NON_MINIMAL_VARINTS]
    reqs += [("readvarlong", raw.hex()) for raw in BAD_VARLONGS]
    for value, ts in TIMESTAMPED:
        reqs.append(("ts", _hex(value), str(ts)))
        reqs.append(("dts", _hex(codec.encode_timestamped(value, ts))))
    for value, ts, headers in VALUE_TIMESTAMP_HEADERS:
        reqs.append(_vth_request(value, ts, headers))
        reqs.append(("dvth", _hex(codec.encode_value_timestamp_headers(value, ts, headers))))
        reqs.append(("hdr", *_header_fields(headers)))
    for raw in CONVERSIONS:
        reqs += [("tsconv", raw.hex()), ("convplain", raw.hex())]
        timestamped = codec.encode_timestamped(raw, -7)
        assert timestamped is not None
        reqs.append(("conv", timestamped.hex()))
    for value, ts, headers in VALUE_TIMESTAMP_HEADERS:
        reqs.append(("rawts", _hex(codec.encode_value_timestamp_headers(value, ts, headers))))
    reqs += [("dvth", raw.hex()) for raw in BAD_HEADER_VALUES]
    reqs += [("dvth", raw.hex()) for raw in LENIENT_IN_KAFKA]
    reqs += [("readvarint", "ffffffff7f"), ("readvarlong", "ffffffffffffffffff7f")]
    return reqs



# --- the Java side -----------------------------------------------------------------------------


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not on PATH: install a JDK 17 (this test must not skip)")
    return path


@pytest.fixture(scope="module")
def kafka_classpath() -> str:
    """The resolved kafka bundle; ``jars.jars`` raises SetupError (run `ttl setup`) if absent."""
    paths = jars.jars("kafka")
    missing = [p for p in paths if not p.exists()]
    assert not missing, f"kafka jars listed but missing on disk: {missing}; run `ttl setup`"
    assert any(p.name.startswith("kafka-streams-") for p in paths), paths
    return ":".join(str(p) for p in paths)


@pytest.fixture(scope="module")
def streams_bytes(tmp_path_factory: pytest.TempPathFactory, kafka_classpath: str) -> Path:
    """``StreamsBytes.java`` compiled against the kafka jars, once per module."""
    javac = _require_tool("javac")
    out = tmp_path_factory.mktemp("streams-bytes")
    proc = subprocess.run(
        [javac, "-encoding", "UTF-8", "-d", str(out), "-cp", kafka_classpath, str(JAVA_SOURCE)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.fixture(scope="module")
def ask_kafka(streams_bytes: Path, kafka_classpath: str) -> Callable[[Request], Answer]:
    """Kafka's answer to each request, all computed in one JVM run."""
    java = _require_tool("java")
    requests = list(dict.fromkeys(_all_requests()))
    proc = subprocess.run(
        [java, "-cp", f"{streams_bytes}:{kafka_classpath}", "StreamsBytes"],
        input="".join("\t".join(r) + "\n" for r in requests),
        capture_output=True, text=True, encoding="utf-8", timeout=300, check=False,
    )
    assert proc.returncode == 0, f"StreamsBytes failed:\n{proc.stderr}"
    for name in KAFKA_CLASSES:
        assert name in proc.stderr, f"expected Kafka to use {name}; it reported {proc.stderr}"
    lines = proc.stdout.split("\n")[:-1]
    assert len(lines) == len(requests), proc.stdout
    answers = {req: tuple(line.split("\t")) for req, line in zip(requests, lines, strict=True)}

    def ask(request: Request) -> Answer:
        return answers[request]

    return ask


def _ok_bytes(answer: Answer) -> bytes | None:
    """The bytes of an ``ok HEX`` or ``null`` answer."""
    if answer == ("null",):
        return None
    assert answer[0] == "ok" and len(answer) == 2, answer
    return bytes.fromhex(answer[1])


# --- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", VARINTS)
def test_varint_matches_byteutils(ask_kafka: Callable[[Request], Answer], value: int) -> None:
    raw = codec.write_varint(value)
    assert raw == _ok_bytes(ask_kafka(("varint", str(value))))
    assert ask_kafka(("readvarint", raw.hex())) == ("ok", str(value), str(len(raw)))


@pytest.mark.parametrize("value", VARLONGS)
def test_varlong_matches_byteutils(ask_kafka: Callable[[Request], Answer], value: int) -> None:
    raw = codec.write_varlong(value)
    assert raw == _ok_bytes(ask_kafka(("varlong", str(value))))
    assert ask_kafka(("readvarlong", raw.hex())) == ("ok", str(value), str(len(raw)))


def test_unsigned_varints_match_byteutils(ask_kafka: Callable[[Request], Answer]) -> None:
    for value in UNSIGNED_VARINTS:
        assert codec.write_unsigned_varint(value) == _ok_bytes(ask_kafka(("uvarint", str(value))))
    for value in UNSIGNED_VARLONGS:
        assert codec.write_unsigned_varlong(value) == _ok_bytes(ask_kafka(("uvarlong", str(value))))


def test_malformed_varints_rejected_by_both(ask_kafka: Callable[[Request], Answer]) -> None:
    for raw in BAD_VARINTS:
        assert ask_kafka(("readvarint", raw.hex()))[0] == "err", raw
        with pytest.raises(ValueError):
            codec.read_varint(raw)
    for raw in BAD_VARLONGS:
        assert ask_kafka(("readvarlong", raw.hex()))[0] == "err", raw
        with pytest.raises(ValueError):
            codec.read_varlong(raw)


def test_non_minimal_varints_read_alike(ask_kafka: Callable[[Request], Answer]) -> None:
    for raw in NON_MINIMAL_VARINTS:
        value, end = codec.read_varint(raw)
        assert ask_kafka(("readvarint", raw.hex())) == ("ok", str(value), str(end))


@pytest.mark.parametrize(("value", "ts"), TIMESTAMPED, ids=TS_IDS)
def test_timestamped_matches_value_and_timestamp_serde(
    ask_kafka: Callable[[Request], Answer], value: bytes | None, ts: int
) -> None:
    ours = codec.encode_timestamped(value, ts)
    theirs = _ok_bytes(ask_kafka(("ts", _hex(value), str(ts))))
    assert ours == theirs
    assert codec.decode_timestamped(theirs) == (None if value is None else (value, ts))
    read_back = ask_kafka(("dts", _hex(ours)))
    assert read_back == (("null",) if value is None else ("ok", value.hex(), str(ts)))


@pytest.mark.parametrize(("value", "ts", "headers"), VALUE_TIMESTAMP_HEADERS, ids=VTH_IDS)
def test_value_timestamp_headers_matches_serde(
    ask_kafka: Callable[[Request], Answer], value: bytes | None, ts: int, headers: list[Header]
) -> None:
    ours = codec.encode_value_timestamp_headers(value, ts, headers)
    theirs = _ok_bytes(ask_kafka(_vth_request(value, ts, headers)))
    assert ours == theirs
    if value is None:
        assert codec.decode_value_timestamp_headers(theirs) is None
        return
    assert codec.decode_value_timestamp_headers(theirs) == (value, ts, headers)
    expected = ("ok", value.hex(), str(ts), *_header_fields(headers))
    assert ask_kafka(("dvth", _hex(ours))) == expected


@pytest.mark.parametrize(("value", "ts", "headers"), VALUE_TIMESTAMP_HEADERS, ids=VTH_IDS)
def test_headers_block_matches_headers_serializer(
    ask_kafka: Callable[[Request], Answer], value: bytes | None, ts: int, headers: list[Header]
) -> None:
    theirs = _ok_bytes(ask_kafka(("hdr", *_header_fields(headers))))
    assert codec.encode_headers(headers) == theirs
    assert theirs is not None and codec.decode_headers(theirs) == headers


@pytest.mark.parametrize(("value", "ts", "headers"), VALUE_TIMESTAMP_HEADERS, ids=VTH_IDS)
def test_dropping_headers_matches_raw_timestamped_value(
    ask_kafka: Callable[[Request], Answer], value: bytes | None, ts: int, headers: list[Header]
) -> None:
    raw = codec.encode_value_timestamp_headers(value, ts, headers)
    assert codec.headers_format_to_timestamped(raw) == _ok_bytes(ask_kafka(("rawts", _hex(raw))))


@pytest.mark.parametrize("raw", CONVERSIONS)
def test_legacy_conversions_match_kafka(ask_kafka: Callable[[Request], Answer], raw: bytes) -> None:
    assert codec.plain_to_timestamped(raw) == _ok_bytes(ask_kafka(("tsconv", raw.hex())))
    assert codec.plain_to_headers_format(raw) == _ok_bytes(ask_kafka(("convplain", raw.hex())))
    timestamped = codec.encode_timestamped(raw, -7)
    converted = _ok_bytes(ask_kafka(("conv", _hex(timestamped))))
    assert codec.timestamped_to_headers_format(timestamped) == converted
    # The KIP's upgrade rule: a legacy value reads back with empty headers.
    assert codec.decode_value_timestamp_headers(converted) == (raw, -7, [])
    assert codec.decode_legacy_timestamped(timestamped) == (raw, -7, [])


@pytest.mark.parametrize("raw", BAD_HEADER_VALUES, ids=lambda raw: raw.hex() or "empty")
def test_malformed_header_values_rejected_by_both(
    ask_kafka: Callable[[Request], Answer], raw: bytes
) -> None:
    assert ask_kafka(("dvth", raw.hex()))[0] == "err"
    with pytest.raises(ValueError):
        codec.decode_value_timestamp_headers(raw)


def test_stricter_than_kafka_where_documented(ask_kafka: Callable[[Request], Answer]) -> None:
    """Kafka's readers accept these (silently); the codec's docstring says we reject them."""
    for raw in LENIENT_IN_KAFKA:
        assert ask_kafka(("dvth", raw.hex()))[0] == "ok", raw
        with pytest.raises(ValueError):
            codec.decode_value_timestamp_headers(raw)
    assert ask_kafka(("readvarint", "ffffffff7f"))[0] == "ok"  # Kafka drops the extra bits
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        codec.read_varint(bytes.fromhex("ffffffff7f"))
    assert ask_kafka(("readvarlong", "ffffffffffffffffff7f"))[0] == "ok"
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        codec.read_varlong(bytes.fromhex("ffffffffffffffffff7f"))
