"""Vectorised decimal parsing: many ASCII number fields of one byte buffer to float32 at once.

Each field is loaded right-aligned as two little-endian 64-bit words (its last 16 bytes), and
everything after that is SIMD-within-a-register arithmetic on long uint64 vectors: bytes outside
the field and the sign become ``'0'``, non-digits and the decimal point are found with the classic
zero-byte tests, and three multiply-shift steps turn 8 ASCII digits into an integer. For a field
with at most 15 digits and no exponent, the integer mantissa and ``10**k`` are exact doubles, so
``mantissa / 10**k`` is the correctly rounded double (Clinger's fast path): the value
``float(text)`` gives. Fields outside that path (exponents, ``nan``/``inf``, more than 16 bytes
or 15 digits) fall back to ``float()`` one by one; fields that are not numbers are returned by
index so the caller can name the line. Pure numpy, no per-value Python on the fast path.
"""

from __future__ import annotations

import numpy as np

FIELD_PAD = 16  # bytes the buffer must hold before the first field (and 8 after the last)
MAX_FAST_DIGITS = 15

_U = np.uint64
_ONES = _U(0x0101010101010101)
_HIGH = _U(0x8080808080808080)
_LOW7 = _U(0x7F7F7F7F7F7F7F7F)
_ZEROS = _U(0x3030303030303030)  # b"00000000"
_DOTS = _U(0x1E1E1E1E1E1E1E1E)  # ord(".") ^ ord("0") in every byte
_SIXES = _U(0x7676767676767676)  # + byte >= 10 sets the byte's high bit
_POS_LO = _U(0x0706050403020100)  # top byte of (bit * this) = 7 - byte index
_POS_LO1 = _U(0x0807060504030201)  # ... = 8 - byte index
_POS_HI = _U(0x0F0E0D0C0B0A0908)  # ... = 15 - byte index
_POW10 = 10.0 ** np.arange(17)
_KEEP = np.array([0] + [(1 << 64) - (1 << (8 * (8 - n))) for n in range(1, 9)],
                 dtype=np.uint64)  # _KEEP[n]: the last n bytes of a little-endian word


def _word_view(buffer: np.ndarray) -> np.ndarray:
    """uint64 [B-7] view whose element i is the 8 bytes ``buffer[i:i+8]`` (little-endian)."""
    return np.ndarray((buffer.shape[0] - 7,), np.dtype("<u8"), buffer, 0, (1,))


def _zero_bytes(x: np.ndarray) -> np.ndarray:
    """High bit set exactly in the zero bytes of each word."""
    return ~(((x & _LOW7) + _LOW7) | x | _LOW7)


def _digits_to_int(t: np.ndarray) -> np.ndarray:
    """8 digit values per word (first byte most significant) to the integer they spell."""
    t = ((t * _U(10)) + (t >> _U(8))) & _U(0x00FF00FF00FF00FF)
    t = ((t * _U(100)) + (t >> _U(16))) & _U(0x0000FFFF0000FFFF)
    return ((t * _U(10000)) + (t >> _U(32))) & _U(0xFFFFFFFF)


def _mantissa_one_word(lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mantissa, scale, n_dots, not_digit) of fields whose digits and dot fit in ``lo``.

    The value is ``mantissa / 10**scale``. The dot is dropped by moving the fraction bytes one
    place down, which leaves a trailing 0 digit, so ``scale`` is the fraction length + 1.
    """
    dot = _zero_bytes(lo ^ _DOTS) >> _U(7)  # bit 8j set where byte j is "."
    n_dots = (dot * _ONES) >> _U(56)
    scale = (dot * _POS_LO1) >> _U(56)  # 8 - j: fraction digits + 1 (0 without a dot)
    below = dot - _U(1)  # bytes before the dot (all bytes without one)
    above = ~((dot << _U(8)) - _U(1))  # bytes after the dot (none without one)
    digits = (lo & below) | ((lo & above) >> _U(8))
    not_digit = (((digits & _LOW7) + _SIXES) | digits) & _HIGH
    return _digits_to_int(digits), scale, n_dots, not_digit


def _mantissa_two_words(
    lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Like ``_mantissa_one_word`` for fields of up to 16 bytes split over ``hi`` then ``lo``
    (the dot is removed by moving the integer bytes up, so ``scale`` is the fraction length)."""
    dot_lo = _zero_bytes(lo ^ _DOTS) >> _U(7)
    dot_hi = _zero_bytes(hi ^ _DOTS) >> _U(7)
    not_digit = (((lo & _LOW7) + _SIXES) | lo | ((hi & _LOW7) + _SIXES) | hi) & _HIGH
    not_digit &= ~((dot_lo | dot_hi) << _U(7))
    n_dots = ((dot_lo + dot_hi) * _ONES) >> _U(56)
    frac_digits = ((dot_lo * _POS_LO) >> _U(56)) + ((dot_hi * _POS_HI) >> _U(56))
    # Drop the dot: the bytes before it move one place towards the end.
    lo &= ~(dot_lo * _U(0xFF))
    hi &= ~(dot_hi * _U(0xFF))
    in_lo = dot_lo != 0
    below_lo = np.where(in_lo, dot_lo - _U(1), _U(0))
    below_hi = np.where(dot_hi != 0, dot_hi - _U(1), _U(0))
    lo = np.where(in_lo, (lo & ~below_lo) | ((lo & below_lo) << _U(8)) | (hi >> _U(56)), lo)
    hi = np.where(in_lo, hi << _U(8), (hi & ~below_hi) | ((hi & below_hi) << _U(8)))
    mantissa = _digits_to_int(hi) * _U(100000000) + _digits_to_int(lo)
    return mantissa, frac_digits, n_dots, not_digit


def parse_fields(
    buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Parse the fields ``buffer[starts[i]:ends[i]]`` as decimal numbers.

    Args:
      buffer: uint8 [B] with ``FIELD_PAD`` bytes before the first field and 8 after the last.
      starts, ends: int64 [V] field bounds (end exclusive), ``ends - starts >= 1``.

    Returns:
      ``(values, invalid)``: float32 [V] values and int64 [K] indices of fields that are not
      numbers (their value is NaN).
    """
    if starts.shape[0] == 0:
        return np.empty(0, np.float32), np.empty(0, np.int64)
    words = _word_view(buffer)
    first_char = buffer[starts]
    negative = first_char == ord("-")
    body_len = ends - starts - (negative | (first_char == ord("+")))  # digits and dot, int64 [V]
    # Digit values 0..9 per byte (bytes outside the field read as 0); "." becomes 0x1E.
    lo = (words[ends - 8] ^ _ZEROS) & np.take(_KEEP, body_len, mode="clip")  # uint64 [V]
    if body_len.max() <= 8:
        mantissa, scale, n_dots, not_digit = _mantissa_one_word(lo)
        slow = (not_digit != 0) | (n_dots > 1) | (body_len <= n_dots.astype(np.int64))
    else:
        hi = (words[ends - 16] ^ _ZEROS) & np.take(_KEEP, body_len - 8, mode="clip")
        mantissa, scale, n_dots, not_digit = _mantissa_two_words(lo, hi)
        n_digits = body_len - n_dots.astype(np.int64)
        slow = ((not_digit != 0) | (n_dots > 1) | (body_len > 16)
                | (n_digits > MAX_FAST_DIGITS) | (n_digits < 1))
    magnitude = mantissa.astype(np.float64) / np.take(_POW10, scale, mode="clip")
    values = np.where(negative, -magnitude, magnitude).astype(np.float32)
    invalid = []
    for i in np.flatnonzero(slow).tolist():
        try:
            values[i] = float(buffer[starts[i] : ends[i]].tobytes())
        except ValueError:
            values[i] = np.nan
            invalid.append(i)
    return values, np.asarray(invalid, dtype=np.int64)
