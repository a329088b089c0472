"""Lists of str as UTF-8 in one buffer, encoded without the GIL where CPython allows it.

``kernels.str_utf8`` reads CPython's str objects in place (see there for why). This
module decides whether it may: once per process, on probe strings of every storage
kind, it reads each object's header and characters with ``ctypes`` (never past
``sys.getsizeof`` of the object) and a list's item pointers, and checks them against
what the kernels assume; then the kernels must encode the probes as ``str.encode``
does. Any difference (another implementation, a free-threaded build, a future
layout) leaves the kernels unused and the callers on ``str.encode``.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import sysconfig
from functools import lru_cache

import numpy as np

from .kernels.str_utf8 import (
    ASCII_DATA, COMPACT_DATA, LENGTH_AT, STATE_AT, STR_TYPE, TYPE_AT, str_utf8_bound,
    write_str_utf8,
)

_LIST_ITEMS_AT = 24  # PyListObject: ob_refcnt, ob_type, ob_size, then ob_item
_PROBES = ("", "plain ascii\n", "é", "caf\xe9 \xff", "ĀĂ", "日本語 text", "\U0001F600 \u20ac",
           "x" * 300 + "\u4e2d")


def str_list_utf8(texts, run_all=None, parts: int = 1) -> tuple[bytes, np.ndarray] | None:
    """The UTF-8 of ``texts`` (str documents) end to end and each one's byte length
    (int64), or None when the kernels cannot take them: this interpreter is not one whose
    layout was checked, or an item is no exact ``str`` (bytes, a subclass) or holds a lone
    surrogate. The caller then encodes with ``str.encode`` and names any bad item.

    ``parts`` > 1 encodes that many runs of the list at once through ``run_all(function,
    calls)`` (a list of results in order, as ``tokenizer._run_all`` gives), each into a
    buffer of its own (a run's last character may store a byte past its end)."""
    layout = _checked_layout()
    if layout is None:
        return None
    items = list(texts)  # ours: nothing resizes it while the kernels read it
    bounds = np.linspace(0, len(items), max(parts, 1) + 1).astype(np.int64).tolist()
    calls = [(items, lo, hi, layout) for lo, hi in zip(bounds, bounds[1:])]
    runs = run_all(_encoded, calls) if len(calls) > 1 else [_encoded(*calls[0])]
    if any(run is None for run in runs):
        return None
    return b"".join(data for data, _ in runs), np.concatenate([lengths for _, lengths in runs])


def _encoded(items: list, lo: int, hi: int, layout: np.ndarray):
    """(a view of the UTF-8, byte lengths) of ``items[lo:hi]``, or None for a refused item."""
    items_at = ctypes.c_int64.from_address(id(items) + _LIST_ITEMS_AT).value + 8 * lo
    bound = str_utf8_bound(items_at, hi - lo, layout)
    if bound < 0:
        return None
    out = np.empty(bound + 1, dtype=np.uint8)  # a 3-byte character stores 4 bytes
    lengths = np.empty(hi - lo, dtype=np.int64)
    if write_str_utf8(items_at, hi - lo, layout, out.ctypes.data, lengths) >= 0:
        return None
    return memoryview(out)[:int(lengths.sum())], lengths


@lru_cache(maxsize=1)
def _checked_layout() -> np.ndarray | None:
    """The kernels' layout table if this interpreter stores str and list as they assume."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None
    layout = np.zeros(3, dtype=np.int64)
    layout[STR_TYPE] = id(str)
    layout[ASCII_DATA] = sys.getsizeof("") - 1
    layout[COMPACT_DATA] = sys.getsizeof("é") - 2
    probes = list(_PROBES)
    if not (all(_stored_as_assumed(text, layout) for text in probes)
            and _items_as_assumed(probes)):
        return None
    encoded = _encoded(probes, 0, len(probes), layout)
    expected = [text.encode() for text in probes]
    if encoded is None or bytes(encoded[0]) != b"".join(expected) or \
            encoded[1].tolist() != list(map(len, expected)):
        return None
    return layout


def _stored_as_assumed(text: str, layout: np.ndarray) -> bool:
    """Whether ``text``'s type, length, storage kind and characters sit where the kernels
    read them (every read inside the object's ``sys.getsizeof`` bytes)."""
    raw = ctypes.string_at(id(text), sys.getsizeof(text))
    width = max(map(ord, text), default=0).bit_length() + 7 >> 3
    width = {0: 1, 3: 4}.get(width, width)  # "" is stored 1 byte a character, 3 bytes as 4
    ascii = text.isascii()
    data_at = int(layout[ASCII_DATA] if ascii else layout[COMPACT_DATA])
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[width]
    characters = text.encode(codec)
    if len(raw) < max(STATE_AT + 4, data_at + len(characters)):
        return False
    state = struct.unpack_from("<I", raw, STATE_AT)[0]
    return (struct.unpack_from("<q", raw, TYPE_AT)[0] == id(str)
            and struct.unpack_from("<q", raw, LENGTH_AT)[0] == len(text)
            and (state >> 2) & 7 == width and (state >> 5) & 1 == 1
            and (state >> 6) & 1 == ascii
            and raw[data_at:data_at + len(characters)] == characters)


def _items_as_assumed(items: list) -> bool:
    """Whether ``items`` (a list) keeps its item pointers where the kernels read them."""
    header = ctypes.string_at(id(items), _LIST_ITEMS_AT + 8)
    if struct.unpack_from("<qq", header, TYPE_AT) != (id(list), len(items)):
        return False
    items_at = struct.unpack_from("<q", header, _LIST_ITEMS_AT)[0]
    pointers = struct.unpack(f"<{len(items)}q", ctypes.string_at(items_at, 8 * len(items)))
    return list(pointers) == list(map(id, items))
