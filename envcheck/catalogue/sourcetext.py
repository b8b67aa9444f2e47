"""A large catalogue file's text, held compressed while the catalogue is loaded.

A file's text lives for the whole load: the parser reads it, and the lines of a problem are
found in it again once one is reported (at the end, for a duplicate id in a later file). A
fleet's 38 MB of YAML held whole (its bytes and its text, both, while it is decoded) was a
large part of a daemon's reload peak, beside the running catalogue. Held compressed it is a
few MB; the parser is handed it a piece at a time, and only a problem's lines read it whole.
"""

from __future__ import annotations

import codecs
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

__all__ = ["PACK_ABOVE", "SourceText"]

# Smaller files are held as text: compressing one costs more time (~3 ms a MB) than its size
# is worth in memory.
PACK_ABOVE = 8 << 20
_PIECE = 1 << 20  # text handed out at a time, at most (bytes of UTF-8)
_FEED = 1 << 16  # compressed bytes taken at a time
_LEVEL = 2  # as small as level 6 within a few %, twice as fast


class SourceText:
    """UTF-8 text held compressed, read back a piece at a time (:meth:`pieces`) or whole."""

    __slots__ = ("_packed",)

    def __init__(self, chunks: Iterable[bytes]) -> None:
        """``chunks``: the file's bytes in order; raises UnicodeDecodeError if they are not
        UTF-8 (where, in the file, is the caller's to find)."""
        check = codecs.getincrementaldecoder("utf-8")().decode
        packer = zlib.compressobj(_LEVEL)
        packed = []
        for chunk in chunks:
            check(chunk)
            packed.append(packer.compress(chunk))
        check(b"", True)
        packed.append(packer.flush())
        self._packed = b"".join(packed)

    @classmethod
    def read(cls, file: BinaryIO, most: int) -> tuple[SourceText, int] | None:
        """At most ``most`` bytes of ``file`` from where it is, never all in memory at once,
        and how many were read; None (``file`` back where it was) if they are not UTF-8."""
        start, read = file.tell(), 0

        def chunks() -> Iterator[bytes]:
            nonlocal read
            while read < most and (chunk := file.read(min(_PIECE, most - read))):
                read += len(chunk)
                yield chunk

        try:
            return cls(chunks()), read
        except UnicodeDecodeError:
            file.seek(start)
            return None

    def pieces(self) -> Iterator[str]:
        """The text in order, a piece of at most ~1 MB at a time (none empty)."""
        unpacker = zlib.decompressobj()
        decode = codecs.getincrementaldecoder("utf-8")().decode
        view = memoryview(self._packed)
        for start in range(0, len(view), _FEED):
            data: bytes | memoryview = view[start:start + _FEED]
            while data:
                text = decode(unpacker.decompress(data, _PIECE))
                data = unpacker.unconsumed_tail
                if text:
                    yield text
        rest = decode(unpacker.flush(), True)
        if rest:
            yield rest

    def text(self) -> str:
        """The whole text (to report a problem)."""
        return "".join(self.pieces())
