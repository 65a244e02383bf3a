"""A chunked, indexed MCAP writer with a cheap per-message path, for :class:`airplay.data.bag_writer.BagWriter`.

It writes the records that the ``mcap`` library's ``mcap.writer.Writer`` (1.x) writes with its
default options, in the same order: Header; Metadata records directly in the data section;
Schemas, Channels and Messages in chunks (the chunk's uncompressed CRC32, its compression
"zstd" / "lz4" / ""), each chunk followed by its Message Index records; Data End (data
section CRC 0, as the library by default); a summary with the schemas and channels repeated,
Statistics, Chunk Indexes, (no) Attachment Indexes, Metadata Indexes and Summary Offsets;
the Footer with the summary CRC; the magic. For the same calls and the same compressor the
file is byte for byte the library's (``test_bag.py`` checks it), so every MCAP reader reads
it the same way. What differs is the cost: a message is one ``struct`` pack into a
``bytearray`` chunk (about 1-2 us) instead of a record object and a dozen small writes
(about 25 us), and zstd compresses through one reused ``ZstdCompressor`` context.

Records are handed to ``stream.write`` only when a chunk is finished (by size, by
:meth:`McapWriter.flush`, or by :meth:`McapWriter.finish`), so what reached the OS is always
whole records up to the end of a chunk and its message indexes; the caller decides when
to flush (crash safety) and when to fsync.
"""

from __future__ import annotations

import struct
import zlib

MAGIC = b"\x89MCAP0\r\n"
"""The MCAP format's magic, at the start and the end of a file."""

_HEADER, _FOOTER, _SCHEMA, _CHANNEL, _MESSAGE, _CHUNK = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
_MESSAGE_INDEX, _CHUNK_INDEX, _ATTACHMENT_INDEX, _STATISTICS = 0x07, 0x08, 0x0A, 0x0B
_METADATA, _METADATA_INDEX, _SUMMARY_OFFSET, _DATA_END = 0x0C, 0x0D, 0x0E, 0x0F

_RECORD = struct.Struct("<BQ")  # opcode, content length
_MESSAGE_RECORD = struct.Struct("<BQHIQQ")  # + channel id, sequence, log time, publish time (then the data)
_MESSAGE_FIELDS = 2 + 4 + 8 + 8
_CHUNK_RECORD = struct.Struct("<BQQQQI")  # + start, end, uncompressed size, uncompressed CRC
_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_ID_U64 = struct.Struct("<HQ")  # channel id -> count / offset map entries
_FOOTER_PREFIX = struct.Struct("<BQQQ")
_NO_MESSAGE = 2**64 - 1

COMPRESSIONS = ("zstd", "lz4", "")
"""Chunk compressions: zstd (the ``zstandard`` package), lz4 (``lz4.frame``) or none."""


def _string(text: str) -> bytes:
    data = text.encode()
    return _U32.pack(len(data)) + data


def _string_map(mapping: dict[str, str]) -> bytes:
    body = b"".join(_string(k) + _string(v) for k, v in mapping.items())
    return _U32.pack(len(body)) + body


def _record(opcode: int, body: bytes) -> bytes:
    return _RECORD.pack(opcode, len(body)) + body


def _compressor(compression: str, zstd_level: int):
    """bytes -> compressed bytes for a chunk (None: stored as is)."""
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise RuntimeError("MCAP zstd chunk compression needs the zstandard package (pip install zstandard)") \
                from None
        return zstandard.ZstdCompressor(level=zstd_level).compress  # one context, reused for every chunk
    if compression == "lz4":
        try:
            import lz4.frame
        except ImportError:
            raise RuntimeError("MCAP lz4 chunk compression needs the lz4 package (pip install lz4)") from None
        return lz4.frame.compress
    return None


class McapWriter:
    """MCAP file being written to the binary ``stream`` (positioned at its start, e.g. ``open(p, "xb")``).

    ``chunk_size``: a chunk is finished once its uncompressed records exceed this many bytes.
    ``compression``: "zstd", "lz4" or "" per chunk; ``zstd_level`` the zstd level (3 = the
    zstd and mcap libraries' default). Call :meth:`start` first and :meth:`finish` last
    (it does not close the stream). Times are integer nanoseconds.
    """

    def __init__(self, stream, *, chunk_size: int = 1 << 20, compression: str = "zstd", zstd_level: int = 3) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"MCAP chunk compression must be zstd, lz4 or empty, got {compression!r}")
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0 bytes, got {chunk_size}")
        self.chunk_size = int(chunk_size)
        self.compression = compression
        self._compress = _compressor(compression, int(zstd_level))
        self._compression_field = _string(compression)
        self._stream = stream
        self._pos = 0  # bytes handed to the stream
        self._schemas: list[bytes] = []  # the records, for the summary
        self._channels: list[bytes] = []
        self._chunk_indexes: list[bytes] = []
        self._metadata_indexes: list[bytes] = []
        self._counts: dict[int, int] = {}  # channel id -> messages, in first-message order
        self._message_count = self._metadata_count = 0
        self._start, self._end = _NO_MESSAGE, 0
        self._new_chunk()
        self.finished = False

    def _new_chunk(self) -> None:
        self._chunk = bytearray()
        self._index: dict[int, list[int]] = {}  # channel id -> [log_time, offset, log_time, offset, ...]
        self._chunk_start, self._chunk_end = _NO_MESSAGE, 0

    def _write(self, data) -> None:
        self._stream.write(data)
        self._pos += len(data)

    # -- records ---------------------------------------------------------------------------
    def start(self, profile: str = "", library: str = "") -> None:
        """The magic and the Header record (``profile`` e.g. "ros2"; ``library`` the writer's name)."""
        self._write(MAGIC + _record(_HEADER, _string(profile) + _string(library)))

    def add_metadata(self, name: str, data: dict[str, str]) -> None:
        """A Metadata record (string -> string), written at once in the data section (not in a chunk)."""
        record = _record(_METADATA, _string(name) + _string_map(data))
        self._metadata_indexes.append(_record(_METADATA_INDEX, _U64.pack(self._pos) + _U64.pack(len(record))
                                              + _string(name)))
        self._metadata_count += 1
        self._write(record)

    def register_schema(self, name: str, encoding: str, data: bytes) -> int:
        """A Schema record (in the chunk in progress); returns its id (1, 2, ...)."""
        schema_id = len(self._schemas) + 1
        record = _record(_SCHEMA, _U16.pack(schema_id) + _string(name) + _string(encoding)
                         + _U32.pack(len(data)) + bytes(data))
        self._schemas.append(record)
        self._chunk += record
        self._maybe_finish_chunk()
        return schema_id

    def register_channel(self, topic: str, message_encoding: str, schema_id: int,
                         metadata: dict[str, str] | None = None) -> int:
        """A Channel record (in the chunk in progress); returns its id (1, 2, ...)."""
        channel_id = len(self._channels) + 1
        record = _record(_CHANNEL, _U16.pack(channel_id) + _U16.pack(schema_id) + _string(topic)
                         + _string(message_encoding) + _string_map(metadata or {}))
        self._channels.append(record)
        self._chunk += record
        self._maybe_finish_chunk()
        return channel_id

    def add_message(self, channel_id: int, log_time: int, data: bytes, publish_time: int, sequence: int = 0) -> None:
        """A Message record in the chunk in progress (``data``: bytes; times in ns)."""
        chunk = self._chunk
        index = self._index.get(channel_id)
        if index is None:
            index = self._index[channel_id] = []
        index += (log_time, len(chunk))
        chunk += _MESSAGE_RECORD.pack(_MESSAGE, _MESSAGE_FIELDS + len(data), channel_id, sequence, log_time,
                                      publish_time)
        chunk += data
        if log_time < self._chunk_start:
            self._chunk_start = log_time
        if log_time > self._chunk_end:
            self._chunk_end = log_time
        if len(chunk) > self.chunk_size:
            self._finish_chunk()

    def _maybe_finish_chunk(self) -> None:
        if len(self._chunk) > self.chunk_size:
            self._finish_chunk()

    def _finish_chunk(self) -> None:
        """Compress the chunk in progress, write it and its message indexes (nothing when it has no message)."""
        index = self._index
        if not index:
            return  # schemas / channels wait for the first message, as with the mcap library
        raw = self._chunk
        compressed = raw if self._compress is None else self._compress(raw)
        head = _CHUNK_RECORD.pack(_CHUNK, 8 + 8 + 8 + 4 + len(self._compression_field) + 8 + len(compressed),
                                  self._chunk_start, self._chunk_end, len(raw), zlib.crc32(raw))
        chunk_offset = self._pos
        self._write(head + self._compression_field + _U64.pack(len(compressed)))
        self._write(compressed)
        chunk_length = self._pos - chunk_offset
        offsets = []
        for channel_id, entries in index.items():
            n = len(entries)
            offsets.append(_ID_U64.pack(channel_id, self._pos))
            self._write(struct.pack(f"<BQHI{n}Q", _MESSAGE_INDEX, 2 + 4 + 8 * n, channel_id, 8 * n, *entries))
            count = n // 2
            self._counts[channel_id] = self._counts.get(channel_id, 0) + count
            self._message_count += count
        offsets_field = _U32.pack(10 * len(offsets)) + b"".join(offsets)
        self._chunk_indexes.append(_record(_CHUNK_INDEX, struct.pack(
            "<QQQQ", self._chunk_start, self._chunk_end, chunk_offset, chunk_length) + offsets_field
            + _U64.pack(self._pos - chunk_offset - chunk_length) + self._compression_field
            + struct.pack("<QQ", len(compressed), len(raw))))
        self._start = min(self._start, self._chunk_start)
        self._end = max(self._end, self._chunk_end)
        self._new_chunk()

    def flush(self) -> None:
        """Finish the chunk in progress (if it has a message) and flush the stream (no fsync)."""
        self._finish_chunk()
        self._stream.flush()

    def finish(self) -> None:
        """The last chunk, Data End, the summary and the Footer; flushes the stream (does not close it)."""
        if self.finished:
            return
        self._finish_chunk()
        self._write(_record(_DATA_END, _U32.pack(0)))
        summary_start = self._pos
        summary = bytearray()
        groups = []

        def group(opcode: int, records) -> None:
            start = len(summary)
            for r in records:
                summary.extend(r)
            groups.append((opcode, summary_start + start, len(summary) - start))

        group(_SCHEMA, self._schemas)
        group(_CHANNEL, self._channels)
        start = 0 if self._message_count == 0 else self._start
        group(_STATISTICS, [_record(_STATISTICS, struct.pack(
            "<QHIIIIQQ", self._message_count, len(self._schemas), len(self._channels), 0, self._metadata_count,
            len(self._chunk_indexes), start, self._end) + _U32.pack(10 * len(self._counts))
            + b"".join(_ID_U64.pack(c, n) for c, n in self._counts.items()))])
        group(_CHUNK_INDEX, self._chunk_indexes)
        group(_ATTACHMENT_INDEX, [])
        group(_METADATA_INDEX, self._metadata_indexes)
        offsets_start = summary_start + len(summary)
        for opcode, start, length in groups:
            summary += _record(_SUMMARY_OFFSET, struct.pack("<BQQ", opcode, start, length))
        crc = zlib.crc32(_FOOTER_PREFIX.pack(_FOOTER, 8 + 8 + 4, summary_start, offsets_start), zlib.crc32(summary))
        self._write(summary)
        self._write(_record(_FOOTER, struct.pack("<QQI", summary_start, offsets_start, crc)) + MAGIC)
        self._stream.flush()
        self.finished = True
