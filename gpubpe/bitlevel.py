"""Bit-level codec: UTF-8 byte fallbacks re-encoded below the byte boundary.

A byte-level tokenizer writes a character it has no token for as its UTF-8 bytes:
three byte ids ``b1 b2 b3`` for most CJK characters. :class:`BitLevelCodec`
rewrites each such character (``b1`` a lead byte of the configured set, default
E0-EF; ``b2 b3`` continuation bytes) as a prefix id for ``b1 >> 2``, written only
when it differs from the prefix in force, and two 9-bit values
``hi = ((b1 & 3) << 7) | (b2 >> 1)`` and ``lo = ((b2 & 1) << 8) | b3``. Any id
that is not part of such a character passes through and ends the prefix in force.

Id layout, for ``base_vocab_size = N`` (every id the base tokenizer emits is below N):

- ids ``0 .. N-1`` are the base ids (bytes 0-255, merged tokens, special tokens);
- ``N + k`` is the k-th of the 256 values a character can produce, in increasing
  order (``hi`` takes 128 values and ``lo`` 128 others, never the same, so a value
  id says by itself which half it is);
- ``N + 256 + k`` is the prefix id of the k-th prefix ``b1 >> 2`` of the lead set.

This module holds the policy (layout, checks, errors, which kernel runs);
``gpubpe.kernels.bitpack`` does the array work.

>>> codec = BitLevelCodec(base_vocab_size=1000, lead_bytes=range(0xE4, 0xF0))
>>> coded = codec.encode(list("众唤众".encode()))  # E4 BC 97  E5 94 A4  E4 BC 97
>>> [codec.describe(t) for t in coded]
['prefix 0x39', 'hi 0x05E', 'lo 0x097', 'hi 0x0CA', 'lo 0x0A4', 'hi 0x05E', 'lo 0x097']
>>> bytes(codec.decode(coded)).decode()
'众唤众'
"""

from __future__ import annotations

import numpy as np

from ._threads import check_num_threads, run_all, thread_count
from .backend import resolve_backend
from .device import is_device_array
from .errors import ConfigError, GpubpeError
from .kernels import bitpack
from .kernels._cuda import kernel_view, to_device, to_host

# The 9-bit values a character can produce (b2, b3 are continuation bytes 0x80-0xBF).
_CONTINUATION = range(0x80, 0xC0)
HI_VALUES = tuple(sorted({(low2 << 7) | (b2 >> 1) for low2 in range(4) for b2 in _CONTINUATION}))
LO_VALUES = tuple(sorted({((b2 & 1) << 8) | b3 for b2 in _CONTINUATION for b3 in _CONTINUATION}))
VALUES = tuple(sorted(HI_VALUES + LO_VALUES))  # value id N + k holds VALUES[k]

DEFAULT_LEAD_BYTES = range(0xE0, 0xF0)  # every 3-byte UTF-8 lead
PAPER_LEAD_BYTES = range(0xE4, 0xF0)  # the paper's setting: 3 prefixes p1-p3 (0x39-0x3B)
BACKENDS = ("numpy", "cpu", "cuda")
_BACKEND_OF_TARGET = {"numpy": "cpu", "cpu": "cpu", "cuda": "cuda"}  # kernel target: backend
ERROR_MODES = ("strict", "replace")
_MAX_ID = 0xFFFFFFFF
_HI_SET, _LO_SET = frozenset(HI_VALUES), frozenset(LO_VALUES)
_VALUE_INDEX = {value: k for k, value in enumerate(VALUES)}


class BitLevelEncodeError(GpubpeError, ValueError):
    """The input of ``encode`` holds an id the codec cannot pass through (>= base_vocab_size)."""


class BitLevelDecodeError(GpubpeError, ValueError):
    """Coded input is malformed; the message names the position, the id and the cause."""


class BitLevelCodec:
    """Re-encodes 3-byte UTF-8 characters in byte-level token ids as [prefix] hi lo.

    ``base_vocab_size``: the number of ids the base tokenizer can emit (normal and
    special tokens), at least 256. ``lead_bytes``: the lead bytes whose characters
    are re-encoded, a subset of E0-EF (``PAPER_LEAD_BYTES`` gives the paper's
    E4-EF). ``backend``: ``"cpu"`` (Numba, all cores), ``"numpy"`` or ``"cuda"``
    (Numba-CUDA kernels over CuPy; under ``NUMBA_ENABLE_CUDASIM=1`` the simulator
    runs them over NumPy arrays).

    Decoding does not check that a character's lead byte is in the lead set: the
    bits decode to bytes all the same, and ``decode(encode(x)) == x`` holds for any x.
    """

    def __init__(self, base_vocab_size: int, lead_bytes=DEFAULT_LEAD_BYTES, *,
                 backend: str = "cpu"):
        self.base_vocab_size = _check_base_vocab_size(base_vocab_size)
        self.lead_bytes = _check_lead_bytes(lead_bytes)
        self.prefixes = tuple(sorted({b >> 2 for b in self.lead_bytes}))
        self.vocab_size = self.base_vocab_size + len(VALUES) + len(self.prefixes)
        if self.vocab_size > _MAX_ID + 1:
            raise ConfigError(f"base_vocab_size={base_vocab_size} leaves no room for the codec's "
                              f"{self.vocab_size - self.base_vocab_size} ids in uint32")
        self.backend = _check_backend(backend)
        # Where the kernels run ("numpy" is a host target too); "cuda" without a usable
        # device raises BackendUnavailable here, naming why.
        self._place = resolve_backend(_BACKEND_OF_TARGET[backend])
        self._xp = self._place.xp
        self._tables = _build_tables(self.base_vocab_size, self.lead_bytes, self.prefixes)
        self._device_tables = {k: kernel_view(to_device(self._xp, v))
                               for k, v in self._tables.items()} \
            if self._place.on_device else self._tables

    def __repr__(self) -> str:
        leads = f"0x{self.lead_bytes[0]:02X}-0x{self.lead_bytes[-1]:02X}"
        return (f"BitLevelCodec(base_vocab_size={self.base_vocab_size}, lead bytes {leads}, "
                f"{len(self.prefixes)} prefixes, vocab_size={self.vocab_size}, "
                f"backend={self.backend!r})")

    # --- id layout ---------------------------------------------------------------------

    @property
    def n_prefixes(self) -> int:
        return len(self.prefixes)

    def value_id(self, value: int) -> int:
        """The id of a 9-bit ``hi`` or ``lo`` value."""
        if value not in _VALUE_INDEX:
            raise ConfigError(
                f"{value!r} is not a 9-bit value a character can produce: hi values are "
                "0x040-05F, 0x0C0-0DF, 0x140-15F, 0x1C0-1DF and lo values 0x080-0BF, "
                "0x180-1BF; compute them as ((b1 & 3) << 7) | (b2 >> 1) and ((b2 & 1) << 8) | b3")
        return self.base_vocab_size + _VALUE_INDEX[value]

    def prefix_id(self, prefix: int) -> int:
        """The id of the prefix ``b1 >> 2`` of a lead byte in the set."""
        if prefix not in self.prefixes:
            known = ", ".join(f"0x{p:02X}" for p in self.prefixes)
            raise ConfigError(f"{prefix!r} is not a prefix of this codec (b1 >> 2 of its lead "
                              f"bytes: {known}); pass b1 >> 2 for a lead byte in the set")
        return self.base_vocab_size + len(VALUES) + self.prefixes.index(prefix)

    def value_of(self, token_id: int) -> int:
        """The 9-bit value a value id stands for (inverse of :meth:`value_id`)."""
        k = int(token_id) - self.base_vocab_size
        if not 0 <= k < len(VALUES):
            raise ConfigError(f"id {token_id} is not a value id of this codec: value ids are "
                              f"{self.base_vocab_size}..{self.base_vocab_size + len(VALUES) - 1}")
        return VALUES[k]

    def prefix_of(self, token_id: int) -> int:
        """The prefix ``b1 >> 2`` a prefix id stands for (inverse of :meth:`prefix_id`)."""
        k = int(token_id) - self.base_vocab_size - len(VALUES)
        if not 0 <= k < len(self.prefixes):
            first = self.base_vocab_size + len(VALUES)
            raise ConfigError(f"id {token_id} is not a prefix id of this codec: prefix ids are "
                              f"{first}..{self.vocab_size - 1}")
        return self.prefixes[k]

    def describe(self, token_id: int) -> str:
        """A short name of an id: ``'id 65'``, ``'hi 0x05E'``, ``'lo 0x097'``, ``'prefix 0x39'``."""
        token_id = int(token_id)
        if token_id < self.base_vocab_size:
            return f"id {token_id}"
        if token_id >= self.vocab_size:
            return f"invalid id {token_id}"
        if token_id >= self.base_vocab_size + len(VALUES):
            return f"prefix 0x{self.prefix_of(token_id):02X}"
        value = self.value_of(token_id)
        return f"{'hi' if value in _HI_SET else 'lo'} 0x{value:03X}"

    # --- encode / decode ---------------------------------------------------------------

    def encode(self, ids, *, num_threads: int | None = None):
        """Re-encode one sequence of base ids. A list comes back as a list, an array as uint32."""
        array, as_list = _as_ids(ids)
        out, _ = self.encode_batch(array, np.array([0, array.size], dtype=np.int64),
                                   num_threads=num_threads)
        return out.tolist() if as_list else out

    def decode(self, coded, errors: str = "strict", *, num_threads: int | None = None):
        """Invert :meth:`encode` on one sequence; ``errors="replace"`` writes U+FFFD bytes."""
        array, as_list = _as_ids(coded)
        out, _ = self.decode_batch(array, np.array([0, array.size], dtype=np.int64), errors,
                                   num_threads=num_threads)
        return out.tolist() if as_list else out

    def encode_batch(self, ids, offsets, *, num_threads: int | None = None):
        """Re-encode a ragged batch (flat ids, int64 offsets of length B+1): new (ids, offsets).

        A character never spans two sequences, and each sequence starts with no prefix in force.
        With ``backend="cuda"``, device arrays in (CuPy; uint32 ids, int64 offsets) give
        device arrays out, with no copy to the host (one read: the output size).
        ``num_threads``: the CPU backend's threads (default: every core); the result is
        the same on any number.
        """
        check_num_threads(num_threads)
        if self._on_device(ids, offsets):
            return self._run_on_device("encode", ids, offsets)
        ids, _ = _as_ids(ids)
        offsets = _as_offsets(offsets, ids.size)
        out, out_offsets, first_bad = self._run("encode", ids, offsets, num_threads,
                                                "lead_prefix_ids", "value_ids")
        if first_bad >= 0:
            raise BitLevelEncodeError(
                f"id {int(ids[first_bad])} at {_where(offsets, first_bad)} is not below "
                f"base_vocab_size={self.base_vocab_size}: it would collide with the codec's ids; "
                "pass the base tokenizer's output, or a base_vocab_size above its largest id")
        return out, out_offsets

    def decode_batch(self, ids, offsets, errors: str = "strict", *,
                     num_threads: int | None = None):
        """Invert :meth:`encode_batch`: new (ids, offsets). Malformed units raise or give U+FFFD."""
        if errors not in ERROR_MODES:
            raise ConfigError(f"errors={errors!r} is not one of {ERROR_MODES}")
        check_num_threads(num_threads)
        if self._on_device(ids, offsets):
            return self._run_on_device("decode", ids, offsets, errors)
        ids, _ = _as_ids(ids)
        offsets = _as_offsets(offsets, ids.size)
        out, out_offsets, n_bad, first_bad = self._run("decode", ids, offsets, num_threads,
                                                       "decode_table")
        if n_bad and errors == "strict":
            raise BitLevelDecodeError(
                f"malformed bit-level input at {_where(offsets, first_bad)}: "
                f"{self._malformed_cause(ids, offsets, first_bad)} ({n_bad} malformed unit(s) in "
                "all); decode with errors='replace' to write U+FFFD (EF BF BD) for each instead")
        return out, out_offsets

    def _on_device(self, ids, offsets) -> bool:
        """Device arrays in, with a device backend: the result stays on the device."""
        return self._place.on_device and is_device_array(ids) and is_device_array(offsets)

    def _run_on_device(self, operation, ids, offsets, errors: str = "strict"):
        """encode_batch / decode_batch over device arrays: device (ids, offsets) out.

        The dtypes are checked (uint32 ids, int64 offsets; ConfigError otherwise); the
        offsets' values are the caller's to keep valid, as for any device array. A bad
        id or malformed input raises as on the host, after copying the ids down then.
        """
        if ids.dtype != np.uint32 or offsets.dtype != np.int64 or ids.ndim != 1:
            raise ConfigError(f"device input must be 1-D uint32 ids and int64 offsets, not "
                              f"{ids.dtype} and {offsets.dtype}; convert with .astype() first")
        names = ("lead_prefix_ids", "value_ids") if operation == "encode" else ("decode_table",)
        kernel = getattr(bitpack, f"bitlevel_{operation}_cuda")
        results = kernel(ids, offsets, *(self._device_tables[n] for n in names),
                         self.base_vocab_size, xp=self._xp)
        if operation == "encode":
            failed = results[2] >= 0
        else:
            failed = results[2] > 0 and errors == "strict"
        if failed:  # the host path names the bad id: it raises
            host = (to_host(ids, "bit-level input ids"), to_host(offsets, "bit-level offsets"))
            if operation == "encode":
                self.encode_batch(*host)
            else:
                self.decode_batch(*host, errors)
        return results[0], results[1]

    def _run(self, operation, ids, offsets, num_threads, *table_names):
        """Run the backend's kernel; CUDA inputs go to the device and results come back.

        The CPU's chunks run on this process's threads (``_threads.run_all``); they ran as
        a ``parallel=True`` loop, whose OpenMP layer ended any process forked after it ran
        ("fork() called from a process already using GNU OpenMP": a DataLoader worker)."""
        kernel = getattr(bitpack, f"bitlevel_{operation}_{self.backend}")
        if not self._place.on_device:  # a host target (NumPy's takes no chunks)
            tables = [self._tables[name] for name in table_names]
            return kernel(ids, offsets, *tables, self.base_vocab_size,
                          n_chunks=thread_count(num_threads), run=run_all)
        tables = [self._device_tables[name] for name in table_names]
        xp = self._xp
        results = kernel(to_device(xp, ids), to_device(xp, offsets), *tables,
                         self.base_vocab_size, xp=xp)
        return (to_host(results[0], f"bit-level {operation} ids").astype(np.uint32, copy=False),
                to_host(results[1], f"bit-level {operation} offsets").astype(np.int64, copy=False),
                *results[2:])

    def _malformed_cause(self, ids, offsets, position) -> str:
        """Why the unit starting at ``position`` cannot be decoded, in words."""
        token_id = int(ids[position])
        stop = int(offsets[np.searchsorted(offsets, position, side="right")])
        next_id = int(ids[position + 1]) if position + 1 < stop else None
        next_name = self.describe(next_id) if next_id is not None else "the end of the sequence"
        name = f"id {token_id} ({self.describe(token_id)})"
        if token_id >= self.vocab_size:
            return f"id {token_id} is not below vocab_size={self.vocab_size}"
        if token_id >= self.base_vocab_size + len(VALUES):
            return f"{name} is followed by {next_name}, not by a hi value id"
        if self.value_of(token_id) in _LO_SET:
            return f"{name} has no hi value id right before it"
        if next_id is None or not next_name.startswith("lo"):
            return f"{name} is followed by {next_name}, not by a lo value id"
        return (f"{name} has no prefix in force: a prefix id must come before it, and any id "
                f"below base_vocab_size={self.base_vocab_size} ends the prefix in force")


# --- checks and conversions ---------------------------------------------------------------


def _check_base_vocab_size(base_vocab_size) -> int:
    if isinstance(base_vocab_size, bool) or not isinstance(base_vocab_size, (int, np.integer)):
        raise ConfigError(f"base_vocab_size must be an int, got {base_vocab_size!r}")
    if base_vocab_size < 256:
        raise ConfigError(f"base_vocab_size={base_vocab_size} is below 256: ids 0-255 are the "
                          "byte tokens; pass the number of ids the base tokenizer can emit "
                          "(normal and special tokens, at least 256)")
    return int(base_vocab_size)


def _check_lead_bytes(lead_bytes) -> tuple[int, ...]:
    try:
        leads = sorted({int(b) for b in lead_bytes})
    except (TypeError, ValueError):
        raise ConfigError(f"lead_bytes must be an iterable of ints, got {lead_bytes!r}") from None
    if not leads:
        raise ConfigError("lead_bytes is empty: pass a subset of range(0xE0, 0xF0)")
    outside = [b for b in leads if not 0xE0 <= b <= 0xEF]
    if outside:
        raise ConfigError(f"lead_bytes holds {', '.join(f'0x{b:X}' for b in outside)}: only the "
                          "3-byte UTF-8 leads 0xE0-0xEF can be re-encoded; pass a subset of "
                          "range(0xE0, 0xF0), e.g. range(0xE4, 0xF0) as in the paper")
    return tuple(leads)


def _check_backend(backend) -> str:
    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is not one of {BACKENDS}")
    return backend


def _build_tables(base_vocab_size, lead_bytes, prefixes) -> dict[str, np.ndarray]:
    """The three tables the kernels read (see gpubpe.kernels.bitpack)."""
    first_prefix_id = base_vocab_size + len(VALUES)
    lead_prefix_ids = np.zeros(256, dtype=np.uint32)
    for b in lead_bytes:
        lead_prefix_ids[b] = first_prefix_id + prefixes.index(b >> 2)
    values = np.array(VALUES, dtype=np.uint32)
    value_ids = np.zeros(512, dtype=np.uint32)
    value_ids[values] = base_vocab_size + np.arange(len(VALUES), dtype=np.uint32)
    value_kinds = np.where(np.isin(values, HI_VALUES), bitpack.KIND_HI, bitpack.KIND_LO)
    prefix_entries = (bitpack.KIND_PREFIX << 16) | np.array(prefixes, dtype=np.uint32)
    decode_table = np.concatenate([(value_kinds.astype(np.uint32) << 16) | values,
                                   prefix_entries]).astype(np.uint32)
    return {"lead_prefix_ids": lead_prefix_ids, "value_ids": value_ids,
            "decode_table": decode_table}


def _as_ids(ids) -> tuple[np.ndarray, bool]:
    """(contiguous uint32 array, whether the caller gave something other than an ndarray)."""
    if type(ids).__module__.split(".")[0] == "cupy":
        ids = to_host(ids, "bit-level input ids")  # sync
    as_list = not isinstance(ids, np.ndarray)
    array = np.asarray(ids)
    if as_list and array.size == 0:
        array = array.astype(np.uint32)
    if array.ndim != 1:
        raise ConfigError(f"ids must be one sequence (1-D), got shape {array.shape}")
    if array.dtype == np.uint32:
        return np.ascontiguousarray(array), as_list
    if not np.issubdtype(array.dtype, np.integer):
        raise ConfigError(f"ids must be integers, got dtype {array.dtype}")
    if array.size and (array.min() < 0 or array.max() > _MAX_ID):
        bad = array[(array < 0) | (array > _MAX_ID)][0]
        raise ConfigError(f"id {bad} is outside 0..{_MAX_ID}: token ids are uint32")
    return array.astype(np.uint32), as_list


def _as_offsets(offsets, n_ids) -> np.ndarray:
    """Checked int64 offsets of a ragged batch: 0 first, n_ids last, never decreasing."""
    if type(offsets).__module__.split(".")[0] == "cupy":
        offsets = to_host(offsets, "bit-level input offsets")  # sync
    array = np.asarray(offsets)
    if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
        raise ConfigError(f"offsets must be a 1-D integer array of length B+1, got {offsets!r}")
    if array[0] != 0 or array[-1] != n_ids or np.any(np.diff(array) < 0):
        raise ConfigError(f"offsets must start at 0, end at len(ids)={n_ids} and never "
                          f"decrease; got {array[0]}..{array[-1]}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _where(offsets, position) -> str:
    """'position p' for one sequence, 'sequence s, position p' in a batch."""
    sequence = int(np.searchsorted(offsets, position, side="right")) - 1
    local = int(position - offsets[sequence])
    return f"position {local}" if offsets.size == 2 else f"sequence {sequence}, position {local}"
