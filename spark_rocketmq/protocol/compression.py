"""Compressed message bodies as a consumer inflates them (MessageDecoder.decode, CompressorFactory).

A stored message whose sysFlag has COMPRESSED_FLAG carries its compression type in bits 8..10
(MessageSysFlag.getCompressionType): 1 LZ4, 2 ZSTD, 3 ZLIB, and 0 (a 4.x producer before the bits
existed) ZLIB. The 5.x Java producer compresses a single message's body over compressMsgBodyOverHowmuch
(4 KiB) with its compressType (system property ``rocketmq.message.compressType``, ZLIB by default):
ZLIB as a zlib stream (Deflater), LZ4 as an LZ4 frame (lz4-java's LZ4FrameOutputStream), ZSTD as a
Zstandard frame (zstd-jni's ZstdOutputStream). Neither frame needs to say its decompressed size, so
LZ4 and ZSTD bodies are read as streams (pyarrow's codecs, which the Spark extra installs).
"""

from __future__ import annotations

import zlib

from ..errors import ProtocolError
from .codes import SysFlag

#: CompressionType values (bits 8..10 of sysFlag) by name.
LZ4, ZSTD, ZLIB = 1, 2, 3
#: The codec pyarrow reads each stream type with, by the type's name.
_ARROW_CODEC = {LZ4: ("LZ4", "lz4"), ZSTD: ("ZSTD", "zstd")}


class UnsupportedCompressionError(ProtocolError):
    """A body compressed with a type this client cannot inflate (an unknown type, or LZ4 or ZSTD without pyarrow)."""


def compression_type(sys_flag: int) -> int:
    """MessageSysFlag.getCompressionType: the type in bits 8..10."""
    return (sys_flag & SysFlag.COMPRESSION_TYPE_MASK) >> 8


def inflate(body: bytes | memoryview, sys_flag: int) -> bytes:
    """The body of a message stored with COMPRESSED_FLAG, inflated by the type its sysFlag names.

    Raises UnsupportedCompressionError for a type that is not LZ4, ZSTD or ZLIB (or LZ4 and ZSTD when
    pyarrow is not installed), ProtocolError for a body that is not a stream of its type.
    """
    kind = compression_type(sys_flag)
    if kind in (0, ZLIB):
        try:
            return zlib.decompress(body)
        except zlib.error as exc:
            raise ProtocolError(f"the ZLIB body cannot be inflated: {exc}") from None
    if kind not in _ARROW_CODEC:
        raise UnsupportedCompressionError(f"unknown compression type {kind} in sysFlag {sys_flag:#x}")
    name, codec = _ARROW_CODEC[kind]
    try:
        import pyarrow as pa
    except ImportError:
        raise UnsupportedCompressionError(
            f"the body is {name}-compressed; inflating it needs pyarrow: pip install 'spark-rocketmq[spark]'"
        ) from None
    try:
        with pa.input_stream(pa.py_buffer(body), compression=codec) as stream:
            return bytes(stream.read())
    except (OSError, pa.ArrowException) as exc:
        raise ProtocolError(f"the {name} body cannot be inflated: {exc}") from None
