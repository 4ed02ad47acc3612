"""Vectorised decoding of text fields: hex and decimal integers of up to 8 characters.

A field's bytes are read as one little-endian 64-bit word (8 bytes from its start; the
block is padded so every start has 8), shifted so the field's characters fill the word
from the top, and padded with ``'0'`` below: the word now holds the field left-padded
to 8 characters. Validity and value then take a dozen 64-bit operations per field
(SIMD-within-a-register, as in simdjson's ``parse_eight_digits_unrolled``), on whole
columns of fields at once: no Python per value, no per-character arrays.

Fields these fast paths do not cover (empty, longer than 8 characters, or holding other
characters) are reported as not ``ok``; callers decide what they mean.
"""

from typing import Tuple

import numpy as np

_U = np.uint64
_ONES = _U(0x0101010101010101)
_HIGH = _U(0x8080808080808080)
_LOW7 = _U(0x7F7F7F7F7F7F7F7F)
_ZEROS = _U(0x3030303030303030)  # "00000000"
_NIBBLES = _U(0x0F0F0F0F0F0F0F0F)


class TextBlock:
    """A block of text bytes, with a 64-bit word starting at every byte.

    Args:
        raw: the text.

    Example::

        block = TextBlock(b"ff\\t12\\n")
        value, ok = decode_hex(block, np.array([0]), np.array([2]))   # 255, True
    """

    def __init__(self, raw: bytes) -> None:
        self.buf = np.frombuffer(raw + b"\0" * 8, dtype=np.uint8)
        self.size = len(raw)
        # Overlapping, unaligned words: words[i] is bytes i..i+7 (numpy copies them aligned on read).
        self.words = np.ndarray(shape=(self.size + 1,), dtype="<u8", buffer=self.buf, strides=(1,))

    def text(self, start: int, end: int) -> str:
        return self.buf[start:end].tobytes().decode("utf-8", errors="replace")


def _left_padded(block: TextBlock, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Each field (1..8 bytes) as 8 characters, left-padded with '0', in one word."""
    words = block.words[np.minimum(start, block.size)]
    shift = (8 * (8 - np.clip(length, 1, 8))).astype(np.uint64)
    # Little-endian: the first character is the lowest byte. Shifting up drops the bytes
    # after the field and makes room below for the padding.
    pad = np.where(shift > 0, _ZEROS & ((_U(1) << shift) - _U(1)), _U(0))
    return (words << shift) | pad


def _between(x: np.ndarray, low: int, high: int) -> np.ndarray:
    """High bit of each byte set where ``low < byte < high`` (0 <= low, high <= 128)."""
    low7 = x & _LOW7
    return ((_ONES * _U(127 + high) - low7) & ~x & (low7 + _ONES * _U(127 - low))) & _HIGH


def decode_hex(block: TextBlock, start: np.ndarray, end: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(value, ok)`` of hex fields of 1..8 characters (``0-9a-fA-F``); ``int64``."""
    length = end - start
    x = _left_padded(block, start, length)
    digits = _between(x, 0x2F, 0x3A) | _between(x, 0x40, 0x47) | _between(x, 0x60, 0x67)
    ok = (digits == _HIGH) & (length >= 1) & (length <= 8)
    v = (x & _NIBBLES) + ((x >> _U(6)) & _ONES) * _U(9)  # letters have bit 6 set: +9
    v = ((v & _U(0x000F000F000F000F)) << _U(4)) | ((v & _U(0x0F000F000F000F00)) >> _U(8))
    v = ((v & _U(0x000000FF000000FF)) << _U(8)) | ((v & _U(0x00FF000000FF0000)) >> _U(16))
    v = ((v & _U(0xFFFF)) << _U(16)) | ((v >> _U(32)) & _U(0xFFFF))
    return v.astype(np.int64), ok


def decode_int(block: TextBlock, start: np.ndarray, end: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(value, ok)`` of decimal fields ``-?[0-9]{1,8}``; ``int64``."""
    negative = (end - start >= 2) & (block.buf[np.minimum(start, block.size)] == ord("-"))
    start = start + negative
    length = end - start
    x = _left_padded(block, start, length)
    ok = (_between(x, 0x2F, 0x3A) == _HIGH) & (length >= 1) & (length <= 8)
    v = x - _ZEROS
    v = v * _U(10) + (v >> _U(8))
    v = (((v & _U(0x000000FF000000FF)) * _U(100 + (1000000 << 32))) + (
        ((v >> _U(16)) & _U(0x000000FF000000FF)) * _U(1 + (10000 << 32))
    )) >> _U(32)
    value = (v & _U(0xFFFFFFFF)).astype(np.int64)
    return np.where(negative, -value, value), ok
