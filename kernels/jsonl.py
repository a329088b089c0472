"""The text field of JSON lines, read by a kernel without the GIL (issue 18); and the line
ends of a chunk of a line file or a JSON-lines file (``line_ends``).

``.jsonl`` corpora were read line by line with ``json.loads`` on the reading thread
(~10 us a 1.5 KB line): that thread bounded ``count_words`` and ``encode_files`` on
the most common corpus format (counting: 69 MB/s on one thread, 88 on two). This kernel
handles the lines whose shape it knows, exactly as ``json.loads`` reads them: one
top-level object, the field a string; it checks the whole line's JSON syntax (strings
with their escapes and strict UTF-8, numbers, ``true``/``false``/``null``, nested
objects and arrays) and decodes the field's escapes to UTF-8. Every other line is
``OTHER``, read by the caller with ``json.loads`` (which names any error), so the
kernel never accepts what ``json.loads`` refuses and never reads a field differently:
the field twice (``json.loads`` keeps the last), a lone surrogate escape, ``NaN``/``Infinity``, nesting deeper than ``MAX_DEPTH``, a NUL byte or a
byte-order mark (``json.loads`` of bytes then guesses UTF-16/32 or strips it).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from ._jit import hot, hot_nogil
from ._raw import copy_bytes, load
from .encode._shared import inlined
from .hashing import _LITTLE_ENDIAN
from .pretok import decode_multibyte
from .str_utf8 import put_character

# The shared helpers compiled again, inlined into the string loop: called, they halved its
# speed on Chinese (540 -> 240 MB/s); inlined everywhere, counting took 65 -> 98 ms.
_decode_multibyte = inlined(decode_multibyte.py_func)
_put_character = inlined(put_character.py_func)

TEXT, BLANK, OTHER = 0, 1, 2  # what a line is
MAX_DEPTH = 32  # nesting of objects and arrays the kernel follows; deeper lines are OTHER


@inlined
def _skip_space(data, i, end):
    """The first position at or after ``i`` that is not JSON white space (json's
    ``[ \\t\\n\\r]``)."""
    while i < end and (data[i] == 0x20 or data[i] == 0x09 or data[i] == 0x0A
                       or data[i] == 0x0D):
        i += 1
    return i


@inlined
def _hex(byte):
    """The value of a hex digit, or -1."""
    if 0x30 <= byte <= 0x39:
        return byte - 0x30
    if 0x61 <= byte <= 0x66:
        return byte - 0x57
    if 0x41 <= byte <= 0x46:
        return byte - 0x37
    return -1


@inlined
def _code_unit(data, i, end):
    """The 16-bit value of the 4 hex digits at ``i``, or -1."""
    if i + 4 > end:
        return -1
    value = 0
    for k in range(4):
        digit = _hex(data[i + k])
        if digit < 0:
            return -1
        value = value * 16 + digit
    return value


@inlined
def _escape_end(data, i, end):
    """The end of the escape at ``i`` (after its backslash) and the code point it spells
    (a \\uD800-\\uDBFF followed by \\uDC00-\\uDFFF is one), or (-1, 0): not an escape
    JSON allows, or a lone surrogate (json.loads makes it a str no UTF-8 can hold)."""
    byte = data[i]
    if byte == 0x75:  # u
        unit = _code_unit(data, i + 1, end)
        if unit < 0 or 0xDC00 <= unit <= 0xDFFF:
            return -1, 0
        if unit < 0xD800 or unit > 0xDBFF:
            return i + 5, unit
        if i + 7 > end or data[i + 5] != 0x5C or data[i + 6] != 0x75:
            return -1, 0
        low = _code_unit(data, i + 7, end)
        if low < 0xDC00 or low > 0xDFFF:
            return -1, 0
        return i + 11, 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
    if byte == 0x22 or byte == 0x5C or byte == 0x2F:  # " \ /
        return i + 1, byte
    if byte == 0x62:
        return i + 1, 0x08
    if byte == 0x66:
        return i + 1, 0x0C
    if byte == 0x6E:
        return i + 1, 0x0A
    if byte == 0x72:
        return i + 1, 0x0D
    if byte == 0x74:
        return i + 1, 0x09
    return -1, 0


_ONES, _HIGHS = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)
_SPACES = np.uint64(0x2020202020202020)
_QUOTES, _BACKSLASHES = np.uint64(0x2222222222222222), np.uint64(0x5C5C5C5C5C5C5C5C)
_NEWLINES, _LOWS = np.uint64(0x0A0A0A0A0A0A0A0A), np.uint64(0x7F7F7F7F7F7F7F7F)


@njit(nogil=True, cache=True)
def line_ends(data):
    """int64 ends of the lines of ``data`` (uint8): the position after each "\\n", then
    ``data.size`` when the last line has none (``[0]`` for no data: one empty line).

    8 bytes a step on a little-endian CPU: each newline is a bit of an exact zero-byte
    mask of the word xor "\\n" x 8 (no false bit above a real one), its byte the mask's
    trailing zeros / 8; the first one stored without a branch (a loop over every found bit
    mispredicted at each line: 1.9 -> 1.45 ms on 8.4 MB of 53-byte lines). Issue 18: NumPy's
    ``flatnonzero(data == 10)`` took ~3.2 ms of that chunk (this, with its output: ~2.4),
    read before any counting thread starts: a serial start of counting a line file."""
    n = data.size
    ends = np.empty(n + 1, np.int64)
    base, i, k = np.int64(data.ctypes.data), 0, 0
    while _LITTLE_ENDIAN and i + 8 <= n:
        word = load(base + i, np.uint64) ^ _NEWLINES
        found = ~(((word & _LOWS) + _LOWS) | word | _LOWS)
        ends[k] = i + np.int64(trailing_zeros(found) >> np.uint64(3)) + 1  # kept if found
        k += found != 0
        found &= found - np.uint64(1)
        while found:  # a second newline in 8 bytes (blank lines)
            ends[k] = i + np.int64(trailing_zeros(found) >> np.uint64(3)) + 1
            k += 1
            found &= found - np.uint64(1)
        i += 8
    for j in range(i, n):
        if data[j] == 10:
            ends[k] = j + 1
            k += 1
    if k == 0 or ends[k - 1] != n:
        ends[k] = n
        k += 1
    return ends[:k].copy()


@inlined
def _zero_byte_in(word):
    """Nonzero when one of the 8 bytes of ``word`` is 0."""
    return (word - _ONES) & ~word & _HIGHS


@inlined
def _plain_run_end(data, i, end):
    """The end of the bytes from ``i`` that a JSON string holds as they are (printable
    ASCII but the quote and the backslash): 8 at a time while all 8 are (a byte a step
    read ~1.1 GB/s of English), then byte by byte."""
    base = np.int64(data.ctypes.data)
    while i + 8 <= end:
        word = load(base + i, np.uint64)
        special = ((word - _SPACES) & ~word & _HIGHS) | (word & _HIGHS) \
            | _zero_byte_in(word ^ _QUOTES) | _zero_byte_in(word ^ _BACKSLASHES)
        if special:
            break
        i += 8
    while i < end and 0x20 <= data[i] < 0x80 and data[i] != 0x22 and data[i] != 0x5C:
        i += 1
    return i


@hot
def _string(data, i, end, out, o, write):
    """The string whose opening quote is at ``i``: (the position after its closing quote,
    whether it holds an escape, the position after its text in ``out``), decoded into
    ``out[o]`` when ``write`` (``out`` is untouched otherwise: skipping passes it along);
    (-1, False, o) for what the kernel leaves to json.loads (a raw control character, a bad
    escape or UTF-8, no closing quote)."""
    i += 1
    escaped = False
    while i < end:
        run = _verbatim_run_end(data, i, end)  # copied as it is, in one copy
        if run < 0:
            return -1, False, o
        if write:
            copy_bytes(np.int64(out.ctypes.data) + o, np.int64(data.ctypes.data) + i, run - i)
            o += run - i
        i = run
        if i >= end:
            break
        if data[i] == 0x22:
            return i + 1, escaped, o
        if data[i] != 0x5C:  # a raw control character
            return -1, False, o
        escaped = True
        i, code_point = _escape_end(data, i + 1, end)
        if i < 0:
            return -1, False, o
        if write:  # stores 4 bytes: the caller leaves room
            o = _put_character(np.uint32(code_point), np.int64(out.ctypes.data) + o) \
                - np.int64(out.ctypes.data)
    return -1, False, o


@inlined
def _verbatim_run_end(data, i, end):
    """The end of the bytes from ``i`` a JSON string holds as they are (printable ASCII but
    the quote and the backslash, and valid UTF-8 sequences), or -1 at invalid UTF-8.
    Issue 18: a byte a step, with a copy each, read ~360 MB/s of English and ~370 of
    Chinese; 8 ASCII bytes a step and one copy a run, ~900 and ~540 (1.5 KB documents)."""
    while True:
        i = _plain_run_end(data, i, end)
        if i >= end or data[i] < 0x80:
            return i
        code_point, length = _decode_multibyte(data, i, end)  # strict, as CPython's decoder
        if code_point < 0:
            return -1
        i += length


@hot
def _number_end(data, i, end):
    """The end of the JSON number at ``i`` (json's ``-?(0|[1-9]\\d*)(\\.\\d+)?([eE][-+]?\\d+)?``),
    or -1."""
    if i < end and data[i] == 0x2D:
        i += 1
    if i >= end or not 0x30 <= data[i] <= 0x39:
        return -1
    if data[i] == 0x30:
        i += 1
    else:
        while i < end and 0x30 <= data[i] <= 0x39:
            i += 1
    if i < end and data[i] == 0x2E:
        i += 1
        if i >= end or not 0x30 <= data[i] <= 0x39:
            return -1
        while i < end and 0x30 <= data[i] <= 0x39:
            i += 1
    if i < end and (data[i] == 0x65 or data[i] == 0x45):
        i += 1
        if i < end and (data[i] == 0x2B or data[i] == 0x2D):
            i += 1
        if i >= end or not 0x30 <= data[i] <= 0x39:
            return -1
        while i < end and 0x30 <= data[i] <= 0x39:
            i += 1
    return i


@hot
def _word_end(data, i, end, word):
    """The end of ``word`` (a literal) at ``i``, or -1."""
    if i + word.size > end:
        return -1
    for k in range(word.size):
        if data[i + k] != word[k]:
            return -1
    return i + word.size


_TRUE, _FALSE, _NULL = (int.from_bytes(word, "little") for word in (b"true", b"false", b"null"))


@inlined
def _literal_end(data, i, end, word, size):
    """The end of the literal of ``size`` bytes packed little-endian in ``word`` at ``i``,
    or -1."""
    if i + size > end:
        return -1
    for k in range(size):
        if data[i + k] != (word >> (8 * k)) & 0xFF:
            return -1
    return i + size


@hot
def _scalar_end(data, i, end, out):
    """The end of the string, number or literal at ``i``, or -1 (also for ``NaN`` and
    ``Infinity``, which json.loads takes: the caller's json.loads reads those lines)."""
    byte = data[i]
    if byte == 0x22:
        return _string(data, i, end, out, 0, False)[0]
    if byte == 0x74:
        return _literal_end(data, i, end, _TRUE, 4)
    if byte == 0x66:
        return _literal_end(data, i, end, _FALSE, 5)
    if byte == 0x6E:
        return _literal_end(data, i, end, _NULL, 4)
    return _number_end(data, i, end)


@hot
def _value_end(data, i, end, stack, out):
    """The end of the JSON value at ``i`` (nested objects and arrays followed with
    ``stack``, at most MAX_DEPTH deep), or -1."""
    depth = 0
    while True:
        i = _skip_space(data, i, end)
        if i >= end:
            return -1
        byte = data[i]
        if byte == 0x7B or byte == 0x5B:  # { [
            if depth == MAX_DEPTH:
                return -1
            stack[depth] = byte
            depth += 1
            i = _skip_space(data, i + 1, end)
            if i < end and data[i] == byte + 2:  # {} or []
                i += 1
                depth -= 1
            elif byte == 0x7B:
                i = _key_end(data, i, end, out)
                if i < 0:
                    return -1
                continue  # the member's value
            else:
                continue  # the first element
        else:
            i = _scalar_end(data, i, end, out)
            if i < 0:
                return -1
        # after a value: close containers, or go on to the next member or element
        while True:
            if depth == 0:
                return i
            i = _skip_space(data, i, end)
            if i >= end:
                return -1
            closing = stack[depth - 1] + 2
            if data[i] == closing:
                i += 1
                depth -= 1
                continue
            if data[i] != 0x2C:  # ,
                return -1
            i = _skip_space(data, i + 1, end)
            if stack[depth - 1] == 0x7B:
                i = _key_end(data, i, end, out)
                if i < 0:
                    return -1
            break


@hot
def _key_end(data, i, end, out):
    """After a member's key and its colon (white space skipped), or -1."""
    if i >= end or data[i] != 0x22:
        return -1
    i = _string(data, i, end, out, 0, False)[0]
    if i < 0:
        return -1
    i = _skip_space(data, i, end)
    if i >= end or data[i] != 0x3A:  # :
        return -1
    return i + 1


@hot
def _is_blank(data, start, end):
    """Whether the line is all ``bytes.strip`` white space (space, \\t-\\r)."""
    for i in range(start, end):
        if data[i] != 0x20 and not 0x09 <= data[i] <= 0x0D:
            return False
    return True


@hot
def _line_text(data, start, end, key, stack, out, o):
    """The field ``key`` of the line's object decoded into ``out[o]``: its end there, or
    -1 when the line is left to json.loads."""
    i = _skip_space(data, start, end)
    if i >= end or data[i] != 0x7B:
        return -1
    i = _skip_space(data, i + 1, end)
    found = -1
    text_end = o
    if i < end and data[i] == 0x7D:
        return -1  # {}: no field, json.loads names it
    while True:
        if i >= end or data[i] != 0x22:
            return -1
        # the key decoded after the field's text (if read yet), to compare
        key_end, _, key_out_end = _string(data, i, end, out, text_end, True)
        if key_end < 0:
            return -1
        is_field = key_out_end - text_end == key.size and \
            _word_end(out, text_end, key_out_end, key) >= 0
        i = _skip_space(data, key_end, end)
        if i >= end or data[i] != 0x3A:
            return -1
        i = _skip_space(data, i + 1, end)
        if is_field:
            if found >= 0 or i >= end or data[i] != 0x22:
                return -1  # twice (json.loads keeps the last), or not a string
            found = i
            i, _, text_end = _string(data, i, end, out, o, True)
        else:
            i = _value_end(data, i, end, stack, out)
        if i < 0:
            return -1
        i = _skip_space(data, i, end)
        if i < end and data[i] == 0x2C:
            i = _skip_space(data, i + 1, end)
            continue
        if i >= end or data[i] != 0x7D:
            return -1
        break
    if found < 0 or _skip_space(data, i + 1, end) != end:
        return -1
    return text_end


@hot_nogil
def jsonl_texts(data, line_start, line_end, key, out, kind, text_start, text_end, stack):
    """Each line's field ``key`` (UTF-8 bytes of the name) decoded end to end into ``out``
    (3 bytes longer than ``data``: an escape stores 4): ``kind[k]`` TEXT (its text ``out[text_start[k]:
    text_end[k]]``), BLANK or OTHER (the caller reads it with json.loads). A line holding
    a NUL byte, or starting with a UTF-8 byte-order mark, is OTHER. ``stack``: MAX_DEPTH
    bytes of scratch. Returns the number of OTHER lines.

    Everything is the caller's and only an int comes back: Numba makes a Python object to
    box a returned array, and a signal handler run there (SIGTERM during
    ``gpubpe encode`` of a .jsonl file) raised inside Numba's boxing: SystemError, or
    SIGSEGV in ~1 run in 3 of 25 (``bench``-less repro: a SIGTERM handler raising while a
    loop calls the kernel; with arrays returned 10 of 25 runs failed, 0 with an int)."""
    others = 0
    o = 0
    for k in range(line_start.size):
        start, end = line_start[k], line_end[k]
        text_start[k], text_end[k] = 0, 0
        if _is_blank(data, start, end):
            kind[k] = BLANK
            continue
        has_nul = False
        for i in range(start, end):
            has_nul |= data[i] == 0
        bom = end - start >= 3 and data[start] == 0xEF and data[start + 1] == 0xBB \
            and data[start + 2] == 0xBF
        stop = -1 if has_nul or bom else _line_text(data, start, end, key, stack, out, o)
        if stop < 0:
            kind[k] = OTHER
            others += 1
            continue
        kind[k], text_start[k], text_end[k] = TEXT, o, stop
        o = stop
    return others
