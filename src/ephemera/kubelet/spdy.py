"""SPDY/3.1 framing, as far as Kubernetes' port-forward uses it (pure, no I/O).

kubectl 1.31+ tunnels a SPDY/3.1 connection through a WebSocket (subprotocol
`SPDY/3.1+portforward.k8s.io`): the binary messages, concatenated, are the SPDY byte stream.
This module turns that byte stream into frames and frames into bytes: SYN_STREAM,
SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE and DATA, with the
header blocks compressed by zlib over SPDY/3's dictionary (one compression context per
direction for the whole connection, each block ended by a sync flush), as the SPDY/3 draft
and Go's spdystream (what kubectl and the upstream kubelet speak) do.

PyPI has no kept SPDY library (`spdy-py` 0.2.0 of 2021 is the newest, unmaintained), so the
framing is written here; flow control is not (spdystream neither sends nor honours
WINDOW_UPDATE).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

__all__ = [
    "DATA_FLAG_FIN",
    "FLAG_FIN",
    "HEADER_DICTIONARY",
    "TYPE_GOAWAY",
    "TYPE_HEADERS",
    "TYPE_PING",
    "TYPE_RST_STREAM",
    "TYPE_SETTINGS",
    "TYPE_SYN_REPLY",
    "TYPE_SYN_STREAM",
    "TYPE_WINDOW_UPDATE",
    "ControlFrame",
    "DataFrame",
    "Frame",
    "FrameReader",
    "FrameWriter",
    "SpdyError",
]

VERSION = 3
TYPE_SYN_STREAM = 1
TYPE_SYN_REPLY = 2
TYPE_RST_STREAM = 3
TYPE_SETTINGS = 4
TYPE_PING = 6
TYPE_GOAWAY = 7
TYPE_HEADERS = 8
TYPE_WINDOW_UPDATE = 9
FLAG_FIN = 0x01
DATA_FLAG_FIN = 0x01
MAX_DATA = (1 << 24) - 1
RST_PROTOCOL_ERROR = 1
RST_CANCEL = 5

# SPDY/3's header compression dictionary (draft 3, section 2.6.10.1): length-prefixed
# header names and values, then a run of common status lines, dates and content types.
_DICTIONARY_WORDS = (  # space-separated words, but "200 OK" is one
    "options head post put delete trace accept accept-charset accept-encoding "
    "accept-language accept-ranges age allow authorization cache-control connection "
    "content-base content-encoding content-language content-length content-location "
    "content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
    "server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status", "200 OK", "version HTTP/1.1 url public set-cookie "
    "keep-alive origin")
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
    "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
    "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,"
    "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")


def _dictionary() -> bytes:
    words: list[str] = []
    for index, chunk in enumerate(_DICTIONARY_WORDS):
        words.extend(chunk.split(" ") if index % 2 == 0 else [chunk])
    body = b"".join(struct.pack(">I", len(w)) + w.encode() for w in words)
    return body + _DICTIONARY_TAIL.encode()


HEADER_DICTIONARY = _dictionary()


class SpdyError(Exception):
    """A byte stream that is not SPDY/3.1."""


@dataclass
class ControlFrame:
    """A control frame: its type, flags and the fields its type has."""

    type: int
    flags: int = 0
    stream_id: int = 0
    associated_id: int = 0
    priority: int = 0
    status: int = 0  # RST_STREAM and GOAWAY
    ping_id: int = 0
    delta: int = 0  # WINDOW_UPDATE
    headers: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class DataFrame:
    stream_id: int
    flags: int
    data: bytes


Frame = ControlFrame | DataFrame


def _encode_headers(headers: dict[str, list[str]]) -> bytes:
    out = [struct.pack(">I", len(headers))]
    for name, values in headers.items():
        raw_name = name.lower().encode()
        raw_value = "\x00".join(values).encode()
        out.append(struct.pack(">I", len(raw_name)) + raw_name)
        out.append(struct.pack(">I", len(raw_value)) + raw_value)
    return b"".join(out)


def _decode_headers(block: bytes) -> dict[str, list[str]]:
    try:
        (count,) = struct.unpack_from(">I", block, 0)
        at = 4
        headers: dict[str, list[str]] = {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", block, at)
            name = block[at + 4:at + 4 + n].decode()
            at += 4 + n
            (n,) = struct.unpack_from(">I", block, at)
            value = block[at + 4:at + 4 + n].decode()
            at += 4 + n
            if name != name.lower():
                raise SpdyError("header was not lowercased")
            headers.setdefault(name, []).extend(value.split("\x00"))
    except (struct.error, UnicodeDecodeError):
        raise SpdyError("invalid control frame") from None
    return headers


class FrameReader:
    """Frames out of a byte stream fed in pieces (one header decompressor per connection)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=HEADER_DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames completed by `data` (SpdyError for a malformed stream)."""
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 8:
            first, second = struct.unpack_from(">II", self._buffer, 0)
            length = second & 0xFFFFFF
            if len(self._buffer) < 8 + length:
                break
            payload = bytes(self._buffer[8:8 + length])
            del self._buffer[:8 + length]
            flags = second >> 24
            if first & 0x80000000:
                frames.append(self._control(first, flags, payload))
            else:
                frames.append(DataFrame(first & 0x7FFFFFFF, flags, payload))
        return frames

    def _headers(self, block: bytes) -> dict[str, list[str]]:
        try:
            return _decode_headers(self._inflate.decompress(block))
        except zlib.error:
            raise SpdyError("invalid control frame") from None

    def _control(self, first: int, flags: int, payload: bytes) -> ControlFrame:
        version = (first >> 16) & 0x7FFF
        kind = first & 0xFFFF
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}")
        frame = ControlFrame(kind, flags)
        try:
            if kind == TYPE_SYN_STREAM:
                sid, assoc, prio = struct.unpack_from(">IIB", payload, 0)
                frame.stream_id, frame.associated_id = sid & 0x7FFFFFFF, assoc & 0x7FFFFFFF
                frame.priority = prio >> 5
                frame.headers = self._headers(payload[10:])
            elif kind in (TYPE_SYN_REPLY, TYPE_HEADERS):
                (sid,) = struct.unpack_from(">I", payload, 0)
                frame.stream_id = sid & 0x7FFFFFFF
                frame.headers = self._headers(payload[4:])
            elif kind in (TYPE_RST_STREAM, TYPE_GOAWAY):
                sid, frame.status = struct.unpack_from(">II", payload, 0)
                frame.stream_id = sid & 0x7FFFFFFF
            elif kind == TYPE_PING:
                (frame.ping_id,) = struct.unpack_from(">I", payload, 0)
            elif kind == TYPE_WINDOW_UPDATE:
                sid, delta = struct.unpack_from(">II", payload, 0)
                frame.stream_id, frame.delta = sid & 0x7FFFFFFF, delta & 0x7FFFFFFF
        except struct.error:
            raise SpdyError("invalid control frame") from None
        return frame


class FrameWriter:
    """Frames as bytes (one header compressor per connection)."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(level=9, zdict=HEADER_DICTIONARY)

    def _headers(self, headers: dict[str, list[str]]) -> bytes:
        raw = _encode_headers(headers)
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    @staticmethod
    def _control(kind: int, flags: int, payload: bytes) -> bytes:
        return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload

    def syn_stream(self, stream_id: int, headers: dict[str, list[str]],
                   flags: int = 0) -> bytes:
        payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + self._headers(headers)
        return self._control(TYPE_SYN_STREAM, flags, payload)

    def syn_reply(self, stream_id: int, headers: dict[str, list[str]] | None = None,
                  flags: int = 0) -> bytes:
        payload = struct.pack(">I", stream_id) + self._headers(headers or {})
        return self._control(TYPE_SYN_REPLY, flags, payload)

    def rst_stream(self, stream_id: int, status: int) -> bytes:
        return self._control(TYPE_RST_STREAM, 0, struct.pack(">II", stream_id, status))

    def ping(self, ping_id: int) -> bytes:
        return self._control(TYPE_PING, 0, struct.pack(">I", ping_id))

    def goaway(self, last_stream_id: int, status: int = 0) -> bytes:
        return self._control(TYPE_GOAWAY, 0, struct.pack(">II", last_stream_id, status))

    @staticmethod
    def data(stream_id: int, data: bytes, fin: bool = False) -> list[bytes]:
        """DATA frames carrying `data` (split at SPDY's frame limit); FIN on the last."""
        chunks = [data[i:i + MAX_DATA] for i in range(0, len(data), MAX_DATA)] or [b""]
        out = []
        for index, chunk in enumerate(chunks):
            flags = DATA_FLAG_FIN if fin and index == len(chunks) - 1 else 0
            out.append(struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(chunk))
                       + chunk)
        return out
