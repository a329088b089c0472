"""Bit-level re-encoding of UTF-8 byte ids ("below the byte boundary"), as array kernels.

Three byte ids ``b1 b2 b3`` (``b1`` a lead byte of the configured set, ``b2 b3``
continuation bytes) form one character, written as ``[prefix] hi lo`` with
``hi = ((b1 & 3) << 7) | (b2 >> 1)`` and ``lo = ((b2 & 1) << 8) | b3``; the prefix
id of ``b1 >> 2`` is written only when it differs from the prefix in force, and
any id that is not part of a character ends the prefix in force (DESIGN.md §3).

The id layout is policy (``gpubpe.bitlevel``); it reaches these kernels as tables:

- ``lead_prefix_ids`` uint32[256]: the prefix id of each lead byte of the set, 0 for other bytes;
- ``value_ids`` uint32[512]: the id of each 9-bit value a character can produce, 0 otherwise;
- ``decode_table`` uint32[256 + n_prefixes]: for codec id ``base_vocab_size + k`` the entry
  ``(kind << 16) | payload``: kind ``KIND_HI`` / ``KIND_LO`` with the 9-bit value, or
  ``KIND_PREFIX`` with ``b1 >> 2``.

Every operation exists for three targets under one naming scheme:
``bitlevel_encode_numpy`` / ``_cpu`` / ``_cuda`` and ``bitlevel_decode_*``. They take a
ragged batch, flat ``ids`` (uint32) and ``offsets`` (int64, B+1), and return
``(out_ids, out_offsets, ...)``. Encoding also returns the position of the first
id >= ``base_vocab_size`` (-1 if none). Decoding always writes U+FFFD (EF BF BD)
for a malformed unit and returns how many there were and where the first one
starts (-1 if none): raising is the policy's decision, not the kernels'.

Scalar logic (the bit formulas, "does a character start here", what a coded id
decodes to) is written once as ``@njit`` functions and called by the CUDA kernels
and the CPU's one-unit-at-a-time decoder; the NumPy target calls the same
functions' ``py_func`` on whole arrays where the function is branch-free. The CPU
target's main path is a vector step per 64, 32 or 16 positions, written as LLVM IR
(``kernels/_lanes.py``) because a loop whose positions write 0, 1 or 2 ids each is
not one LLVM vectorises; it restates the formulas on lanes and is tested equal to
the NumPy target.

What was tried for speed, and what it gave: "Performance notes" at the end of the module.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import cuda, njit, types
from numba.core.extending import intrinsic

from ._cuda import (
    array_module,
    device_empty,
    device_full,
    device_zeros,
    exclusive_scan,
    launch,
    launch_counts,
    to_device,
    to_host,
)
from ._jit import hot
from ._lanes import LANES, Flags, LaneBuilder, can_deposit, can_permute

# Kinds of id seen by the decoder. KIND_END stands for "no next id in this sequence".
KIND_PASS, KIND_HI, KIND_LO, KIND_PREFIX, KIND_INVALID, KIND_END = 0, 1, 2, 3, 4, 5
# What one position of coded input decodes to.
UNIT_EMPTY, UNIT_COPY, UNIT_CHAR, UNIT_BAD = 0, 1, 2, 3
NO_PREFIX = -1
N_VALUE_IDS = 256  # codec ids base .. base + 255 are the 9-bit values
REPLACEMENT_BYTES = (0xEF, 0xBF, 0xBD)  # U+FFFD in UTF-8

MIN_CHUNK_IDS = 1 << 22  # a CPU chunk's fewest ids (``_chunk_count``)
SPLIT_SEARCH_WINDOW = 1 << 12  # how far a CPU chunk boundary may move to find a safe split

# Kernel launches by name (shared by every CUDA kernel of gpubpe; tests read it).
cuda_launch_counts = launch_counts


# --- scalar logic shared by every target -------------------------------------------------


# Numba widens uint32 to uint64 in arithmetic, and uint64 meets int64 as float64: the
# helpers therefore compute in int64 (every value here is small) and say so with casts.


@njit(inline="always", cache=True)
def is_continuation(x):
    """True for the UTF-8 continuation bytes 0x80-0xBF (never for ids >= 256)."""
    return (np.int64(x) >> 6) == 2


@njit(inline="always", cache=True)
def starts_char(lead_prefix, b2, b3):
    """A character starts at b1 when b1 is a lead byte of the set (its prefix id is not 0)
    and b2, b3 are continuation bytes: both ``b ^ 0x80`` below 0x40, one test for the two."""
    return lead_prefix != 0 and ((np.int64(b2) ^ 0x80) | (np.int64(b3) ^ 0x80)) < 0x40


@njit(inline="always", cache=True)
def hi_value(b1, b2):
    return ((np.int64(b1) & 3) << 7) | (np.int64(b2) >> 1)


@njit(inline="always", cache=True)
def lo_value(b2, b3):
    return ((np.int64(b2) & 1) << 8) | np.int64(b3)


@njit(inline="always", cache=True)
def lead_byte(prefix, hi):
    return (np.int64(prefix) << 2) | (np.int64(hi) >> 7)


@njit(inline="always", cache=True)
def middle_byte(hi, lo):
    return ((np.int64(hi) & 0x7F) << 1) | (np.int64(lo) >> 8)


@njit(inline="always", cache=True)
def last_byte(lo):
    return np.int64(lo) & 0xFF


@njit(inline="always", cache=True)
def entry_kind(entry):
    return np.int64(entry) >> 16


@njit(inline="always", cache=True)
def entry_payload(entry):
    return np.int64(entry) & 0xFFFF


@njit(inline="always", cache=True)
def non_codec_entry(x, base_vocab_size):
    """The entry of an id outside the codec's table: a base id, or one past vocab_size."""
    return np.int64(KIND_PASS if x < base_vocab_size else KIND_INVALID) << 16


@njit(inline="always", cache=True)
def decode_unit(kind, next_kind, has_prefix, prev_is_hi):
    """What a coded id decodes to, from its kind and its neighbours in the same sequence."""
    if kind == KIND_PASS:
        return UNIT_COPY
    if kind == KIND_PREFIX:
        return UNIT_EMPTY if next_kind == KIND_HI else UNIT_BAD
    if kind == KIND_HI:
        return UNIT_CHAR if next_kind == KIND_LO and has_prefix else UNIT_BAD
    if kind == KIND_LO:
        return UNIT_EMPTY if prev_is_hi else UNIT_BAD
    return UNIT_BAD


@njit(inline="always", cache=True)
def unit_length(unit):
    if unit == UNIT_EMPTY:
        return 0
    return 1 if unit == UNIT_COPY else 3


@njit(inline="always", cache=True)
def encode_length(prefix_here, prefix_back1, prefix_back2, prefix_back3, same_sequence_back3):
    """Ids written for one input position, from the char prefixes starting 0-3 positions back."""
    if prefix_here != 0:
        return 2 if same_sequence_back3 and prefix_back3 == prefix_here else 3
    return 0 if prefix_back1 != 0 or prefix_back2 != 0 else 1


# --- NumPy target: whole-array steps -----------------------------------------------------


def _boundary_flags_numpy(offsets, n):
    """bool[n + 1]: True where a sequence starts or ends."""
    boundary = np.zeros(n + 1, dtype=bool)
    boundary[offsets] = True
    return boundary


def _char_prefixes_numpy(ids, boundary, lead_prefix_ids):
    """uint32[n]: the prefix id of the character starting at each position, 0 where none does."""
    n = ids.size
    lead_prefix = np.where(ids < 256, lead_prefix_ids[np.minimum(ids, 255)], 0)
    starts = (
        (lead_prefix[: n - 2] != 0)
        & is_continuation.py_func(ids[1 : n - 1])
        & is_continuation.py_func(ids[2:])
        & ~boundary[1 : n - 1]
        & ~boundary[2:n]
    )
    char_prefix = np.zeros(n, dtype=np.uint32)
    char_prefix[: max(n - 2, 0)][starts] = lead_prefix[: n - 2][starts]
    return char_prefix


def bitlevel_encode_numpy(ids, offsets, lead_prefix_ids, value_ids, base_vocab_size,
                          n_chunks=1, run=None):
    """Encode with NumPy array steps: start flags, lengths, exclusive scan, scatter.
    ``n_chunks`` and ``run`` are ``bitlevel_encode_cpu``'s, taken and left unused: one
    pass over all the ids.

    Returns ``(out_ids, out_offsets, first_bad)``; ``first_bad`` is the position of
    the first id >= ``base_vocab_size`` outside a character, or -1. Temporaries: a
    few arrays of n flags, prefixes and lengths (about 40 bytes per id).
    """
    n = ids.size
    boundary = _boundary_flags_numpy(offsets, n)
    char_prefix = _char_prefixes_numpy(ids, boundary, lead_prefix_ids)
    is_start = char_prefix != 0
    consumed = np.zeros(n, dtype=bool)
    consumed[1:] |= is_start[:-1]
    consumed[2:] |= is_start[:-2]
    repeats_prefix = np.zeros(n, dtype=bool)
    repeats_prefix[3:] = is_start[:-3] & (char_prefix[:-3] == char_prefix[3:]) & ~boundary[3:n]
    lengths = np.where(is_start, 3 - repeats_prefix.astype(np.int64), np.where(consumed, 0, 1))
    positions = exclusive_scan(np, lengths)
    out = np.empty(positions[-1], dtype=np.uint32)
    copied = lengths == 1
    out[positions[:-1][copied]] = ids[copied]
    starts = np.flatnonzero(is_start)
    at = positions[starts]
    writes_prefix = ~repeats_prefix[starts]
    out[at[writes_prefix]] = char_prefix[starts[writes_prefix]]
    at += writes_prefix
    b1, b2, b3 = ids[starts], ids[starts + 1], ids[starts + 2]
    out[at] = value_ids[hi_value.py_func(b1, b2)]
    out[at + 1] = value_ids[lo_value.py_func(b2, b3)]
    bad = np.flatnonzero(copied & (ids >= base_vocab_size))
    return out, positions[offsets], int(bad[0]) if bad.size else -1


def _entries_numpy(ids, decode_table, base_vocab_size):
    """uint32[n]: each id's decode entry (kind << 16 | payload)."""
    index = ids.astype(np.int64) - base_vocab_size
    in_table = (index >= 0) & (index < decode_table.size)
    outside = np.where(index < 0, KIND_PASS << 16, KIND_INVALID << 16).astype(np.uint32)
    return np.where(in_table, decode_table[np.clip(index, 0, decode_table.size - 1)], outside)


def _prefix_in_force_numpy(kind, payload, boundary):
    """int64[n]: the prefix in force at each position ("last prefix seen" scan), or NO_PREFIX.

    Every id that is not a 9-bit value, and every sequence start, is an event; the
    state after an event is its prefix (prefix ids) or NO_PREFIX (anything else).
    """
    events = ((kind != KIND_HI) & (kind != KIND_LO)) | boundary[: kind.size]
    event_state = np.where(kind == KIND_PREFIX, payload.astype(np.int64), NO_PREFIX)[events]
    return event_state[np.cumsum(events) - 1]


def _decode_units_numpy(kind, boundary, has_prefix):
    """uint8[n]: ``decode_unit`` of every position, as array masks."""
    n = kind.size
    next_kind = np.full(n, KIND_END, dtype=kind.dtype)
    next_kind[:-1] = np.where(boundary[1:n], KIND_END, kind[1:])
    prev_is_hi = np.zeros(n, dtype=bool)
    prev_is_hi[1:] = (kind[:-1] == KIND_HI) & ~boundary[1:n]
    unit = np.full(n, UNIT_BAD, dtype=np.uint8)
    unit[kind == KIND_PASS] = UNIT_COPY
    unit[(kind == KIND_PREFIX) & (next_kind == KIND_HI)] = UNIT_EMPTY
    unit[(kind == KIND_HI) & (next_kind == KIND_LO) & has_prefix] = UNIT_CHAR
    unit[(kind == KIND_LO) & prev_is_hi] = UNIT_EMPTY
    return unit


def bitlevel_decode_numpy(ids, offsets, decode_table, base_vocab_size, n_chunks=1, run=None):
    """Decode with NumPy array steps: classify, "last prefix seen" scan, lengths, scan, scatter
    (``n_chunks`` and ``run`` taken and left unused, as for encoding).

    Returns ``(out_ids, out_offsets, n_malformed, first_malformed)``. Temporaries:
    entries, kinds, prefixes, units and positions (about 50 bytes per id).
    """
    n = ids.size
    boundary = _boundary_flags_numpy(offsets, n)
    entries = _entries_numpy(ids, decode_table, base_vocab_size)
    kind, payload = entry_kind.py_func(entries), entry_payload.py_func(entries)
    prefix = _prefix_in_force_numpy(kind, payload, boundary)
    unit = _decode_units_numpy(kind, boundary, prefix != NO_PREFIX)
    positions = exclusive_scan(np, np.array([0, 1, 3, 3], dtype=np.int64)[unit])
    out = np.empty(positions[-1], dtype=np.uint32)
    copied = unit == UNIT_COPY
    out[positions[:-1][copied]] = ids[copied]
    chars = np.flatnonzero(unit == UNIT_CHAR)
    hi, lo, at = payload[chars], payload[chars + 1], positions[chars]
    out[at] = lead_byte.py_func(prefix[chars], hi)
    out[at + 1] = middle_byte.py_func(hi, lo)
    out[at + 2] = last_byte.py_func(lo)
    bad = np.flatnonzero(unit == UNIT_BAD)
    for k, byte in enumerate(REPLACEMENT_BYTES):
        out[positions[bad] + k] = byte
    return out, positions[offsets], bad.size, int(bad[0]) if bad.size else -1


# --- CPU target: 16-lane vector steps, one chunk of positions per thread -----------------
#
# Chunks split the flat ids at "safe" positions q: a sequence start, or a position
# whose previous id is a plain id (encoding: neither a lead nor a continuation
# byte; decoding: not a codec id). No character crosses a safe split and no
# prefix is in force there, so each chunk runs on its own. Chunk c writes its
# output from growth * bounds[c] + LANES * c (growth 1 when encoding, whose output
# is never longer than its input, 3 when decoding: the LANES ids between chunks take
# the junk a vector store writes past its end); the pieces are then gathered. One
# chunk (one thread) returns its piece as it is, without a copy.
#
# Within a chunk the positions are taken 64 at a time (two vectors) by one wide step in
# 16-bit lanes (``_encode_wide_step``, ``_decode_wide_step``) where the codec's ids fit in
# 16 bits and the CPU has AVX-512BW, else (and at the edges, the chunk's tail, and around
# bad ids or ids of 0xFFFF or more) 16 at a time in 32-bit lanes (``_encode_step``,
# ``_decode_step``); all are LLVM IR written with ``_lanes``, and run across sequence
# ends: every lane works out what its position writes from the ids around it and from the
# sequence starts near it (bits of ``_cut_map``; the wide steps work out character starts,
# classes and checks as bit maps in general-purpose registers), and the kept lanes are
# stored packed. A step reports which lanes it kept, so that a sequence
# starting inside it gets its output offset from a popcount.


@njit(cache=True)
def _is_safe_split(previous_id, decoding, lead_prefix_ids, base_vocab_size, table_size):
    if decoding:
        return previous_id < base_vocab_size or previous_id >= base_vocab_size + table_size
    if is_continuation(previous_id):
        return False
    return previous_id >= 256 or lead_prefix_ids[previous_id] == 0


@njit(cache=True)
def _safe_split_from(ids, offsets, target, decoding, lead_prefix_ids, base, table_size):
    """The first safe split at or after ``target`` (within the search window), or -1."""
    next_sequence_start = offsets[np.searchsorted(offsets, target)]
    for q in range(max(target, 1), min(target + SPLIT_SEARCH_WINDOW, ids.size)):
        if q == next_sequence_start or _is_safe_split(
            ids[q - 1], decoding, lead_prefix_ids, base, table_size
        ):
            return q
    return -1


@njit(cache=True)
def _plan_chunks(ids, offsets, n_wanted, decoding, lead_prefix_ids, base, table_size):
    """int64[k + 1]: bounds of up to ``n_wanted`` chunks, each split moved to a safe spot."""
    n = ids.size
    n_chunks = max(1, min(n_wanted, n))
    bounds = np.empty(n_chunks + 1, dtype=np.int64)
    bounds[0] = 0
    n_bounds = 1
    for c in range(1, n_chunks):
        q = _safe_split_from(ids, offsets, c * n // n_chunks, decoding, lead_prefix_ids, base,
                             table_size)
        if q > bounds[n_bounds - 1]:
            bounds[n_bounds] = q
            n_bounds += 1
    bounds[n_bounds] = n
    return bounds[: n_bounds + 1]


def _chunk_count(n_ids: int, n_wanted: int) -> int:
    """Chunks (threads) for ``n_ids`` ids: up to ``n_wanted``, each of MIN_CHUNK_IDS or more.

    The chunks' outputs are joined by a copy into fresh pages, as costly as encoding them
    on the 2-core VM (20 M ids: 10.6 of 2 chunks' 20.8 ms; one chunk, returned as it is,
    14.3). There 2 chunks on 2 threads were slower than one at every size (encode, min of
    9: 131 K ids 99 -> 326 us, 1 M 416 -> 680, 4 M 1,647 -> 2,340, 8 M 5,930 -> 5,709;
    decode alike), so below 4 M ids a chunk a thread only cost (it was 64 K)."""
    return max(1, min(n_wanted, n_ids // MIN_CHUNK_IDS))


def _one_by_one(function, calls):
    """``function(*args)`` for each args tuple, in order, on this thread."""
    return [function(*args) for args in calls]


def _chunk_sources(bounds, growth):
    """Where each chunk's output starts in the shared buffer (see above)."""
    return growth * bounds[:-1] + LANES * np.arange(bounds.size - 1, dtype=np.int64)


def _join_chunks(out, sources, chunk_lengths, sequence_out, offsets, bounds, run):
    """Join the chunks' outputs (a copy a chunk, through ``run``); turn the recorded
    sequence starts into output offsets.

    Chunk c wrote ``chunk_lengths[c]`` ids from ``out[sources[c]]``; a sequence was
    recorded by the chunk its start falls in, and one that no chunk reached (-1) starts
    at the end of the output.
    """
    n_sequences = sequence_out.size - chunk_lengths.size  # then one spare slot per chunk
    sequence_out = sequence_out[:n_sequences]
    dest = np.zeros(chunk_lengths.size + 1, dtype=np.int64)
    np.cumsum(chunk_lengths, out=dest[1:])
    total = int(dest[-1])
    if chunk_lengths.size == 1:  # the records are the offsets (one chunk, from out[0])
        sequence_out[sequence_out < 0] = total
        return out[:total], sequence_out
    joined = np.empty(total, dtype=np.uint32)
    run(_copy_chunk, [(out, sources[c], chunk_lengths[c], joined, dest[c])
                      for c in range(chunk_lengths.size)])
    return joined, _sequence_offsets(sequence_out, offsets, bounds, dest, sources, total)


@njit(cache=True)
def _sequence_offsets(sequence_out, offsets, bounds, dest, sources, total):
    """Each sequence's start in the joined output, the chunk that recorded it found from
    the chunk bounds (one pass; as NumPy steps, with the gathers of ``dest`` and
    ``sources``, it took ~1.5 ms of a 20 ms call on 320 K documents)."""
    out_offsets = np.empty(sequence_out.size, dtype=np.int64)
    chunk = 0
    for s in range(sequence_out.size):
        start = sequence_out[s]
        if start < 0:
            out_offsets[s] = total
            continue
        while offsets[s] >= bounds[chunk + 1]:
            chunk += 1
        out_offsets[s] = start + dest[chunk] - sources[chunk]
    return out_offsets


@njit(nogil=True, cache=True)
def _copy_chunk(out, source, length, joined, dest):
    joined[dest : dest + length] = out[source : source + length]


@hot
def _enter_sequences(offsets, sequence, i, o, chunk, sequence_out):
    """Step past every sequence that ends at or before position i; each one entered
    starts at output position o in chunk ``chunk``. Returns the sequence holding i."""
    while offsets[sequence + 1] <= i:
        sequence += 1
        sequence_out[sequence] = o
    return sequence


def _first_found(positions):
    """The first position that is not -1 (chunks are in order), or -1."""
    found = positions[positions >= 0]
    return int(found[0]) if found.size else -1


@intrinsic
def _trailing_zeros(typingctx, word):
    """The number of trailing zero bits of a nonzero uint64 (LLVM cttz: one instruction)."""
    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))
    return types.uint64(types.uint64), codegen


@intrinsic
def _popcount(typingctx, word):
    """The number of set bits of a uint64 (LLVM ctpop: one instruction)."""
    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])
    return types.uint64(types.uint64), codegen


EDGE = 8  # added to lane-relative positions: a step reads ids from 3 before its first lane
ENCODE_REACH = (3, LANES + 2)  # an encoding step at p reads ids[p - 3 : p + 18]
WIDE_LANES = 32  # a wide step's vector: 32 positions in 16-bit lanes (every id below 0xFFFF)
WIDE_ENCODE_POSITIONS = 2 * WIDE_LANES  # a wide encoding step: two such vectors
WIDE_DECODE_POSITIONS = 2 * WIDE_LANES  # a wide decoding step likewise
WIDE_ENCODE_REACH = (3, WIDE_ENCODE_POSITIONS + 2)
DECODE_REACH = (0, LANES)  # a decoding step, ids[p : p + 16]
_EDGE_SCRATCH = 2 * EDGE + LANES + ENCODE_REACH[1]
_CUT_MARGIN = 64  # sequence start q is bit q + _CUT_MARGIN of the cut map (p - EDGE >= -64)


@njit(cache=True)
def _cut_map(offsets, n):
    """uint64 bit map of the sequence starts: bit q + _CUT_MARGIN set where a sequence
    starts at q (0 < q < n). A step reads its sequence boundaries from it as data
    (``_cut_window``) instead of restarting at each one: real documents hold ~60 ids, and
    a restart per document cost about as much as the steps themselves."""
    cuts = np.zeros((n + 2 * _CUT_MARGIN + LANES) // 64 + 2, dtype=np.uint64)
    for k in range(offsets.size):
        q = offsets[k]
        if 0 < q < n:
            bit = q + _CUT_MARGIN
            cuts[bit >> 6] |= np.uint64(1) << np.uint64(bit & 63)
    return cuts


@njit(inline="always", cache=True)
def _cut_window(cuts, p):
    """Bit EDGE + k set where a sequence starts at p + k, for -EDGE <= k < 64 - EDGE."""
    bit = p - EDGE + _CUT_MARGIN
    word, shift = bit >> 6, np.uint64(bit & 63)
    low = cuts[word] >> shift
    high = (cuts[word + 1] << np.uint64(1)) << (np.uint64(63) - shift)
    return low | high


@njit(inline="always", cache=True)
def _needs_edge_copy(p, n, reach):
    """Whether a step at p would read outside ids[0:n] (``reach``: how far back, ahead)."""
    return p < reach[0] or p + reach[1] > n


@njit(cache=True)
def _edge_copy(ids, p, scratch):
    """scratch[EDGE + k] = ids[p + k] for -EDGE <= k < len(scratch) - EDGE, 0 outside ids:
    a step at position EDGE of ``scratch`` then sees what it would at p, and zeros (a
    plain id) past either end."""
    for k in range(scratch.size):
        source = p - EDGE + k
        scratch[k] = ids[source] if 0 <= source < ids.size else 0


@njit(inline="always", cache=True)
def _record_sequence_starts(offsets, sequence, stop, o, kept_bits, lanes_per_position, p,
                            chunk, sequence_out):
    """Enter every sequence that starts before ``stop``; the one starting at p + k begins
    at output position o + (the kept bits below bit k * lanes_per_position). Returns
    the sequence holding stop - 1.

    A step holds at most one sequence start nearly always (documents of ~60 ids, steps
    of 16 or 32): that case is branch-free, the record written to this chunk's spare
    slot (``offsets.size + chunk``) when no sequence starts; a data-dependent loop here
    mispredicted about once a document (~5 of 20 ms, real zh+ja encoding)."""
    if sequence + 2 >= offsets.size or offsets[sequence + 2] >= stop:
        next_start = offsets[sequence + 1]
        enters = next_start < stop
        below = min(next_start - p, 31) * lanes_per_position  # (no start: any value)
        mask = (np.uint64(1) << np.uint64(below)) - np.uint64(1)
        slot = sequence + 1 if enters else offsets.size + chunk
        sequence_out[slot] = o + _popcount(np.uint64(kept_bits) & mask)
        return sequence + np.int64(enters)
    while offsets[sequence + 1] < stop:
        sequence += 1
        below = (offsets[sequence] - p) * lanes_per_position
        mask = (np.uint64(1) << np.uint64(below)) - np.uint64(1)
        sequence_out[sequence] = o + _popcount(np.uint64(kept_bits) & mask)
    return sequence


@njit(inline="always", cache=True)
def _record_wide_starts(offsets, sequence, starts, kept, p, o, chunk, sequence_out):
    """``_record_sequence_starts`` for a wide encoding step (WIDE_ENCODE_POSITIONS
    positions, one lane each, all in the chunk; ``starts``: bit k set where a sequence
    starts at p + k): where it holds at most two sequence starts, branch-free, their
    positions from the bits rather than loads of ``offsets`` (the loop of the general
    case waits on them, and mispredicted where short documents gave two starts a step).
    Records of starts absent go to the chunk's spare slot. Where more sequences start
    in the step than it has start bits (empty sequences share one), or more than two, the
    general case redoes them."""
    stop = p + WIDE_ENCODE_POSITIONS
    one, top = np.uint64(1), np.uint64(1) << np.uint64(63)  # (cttz of 0 is undefined)
    starts = np.uint64(starts)
    n_starts = np.int64(_popcount(starts))
    has_first, has_second = np.int64(n_starts >= 1), np.int64(n_starts >= 2)
    first = _trailing_zeros(starts | top)
    second = _trailing_zeros((starts & (starts - one)) | top)
    kept = np.uint64(kept)
    spare = offsets.size + chunk
    for k, (has, below) in enumerate(((has_first, first), (has_second, second))):
        slot = np.uint64(spare + has * (sequence + 1 + k - spare))  # (no branch)
        sequence_out[slot] = o + np.int64(_popcount(kept & ((one << below) - one)))
    entered = sequence + has_first + has_second
    if (n_starts <= 2) & (offsets[np.uint64(entered + 1)] >= stop):  # no more sequences: the
        return entered  # starts were distinct, so the records are those of the next ones
    return _record_sequence_starts(offsets, sequence, stop, o, kept, 1, p, chunk, sequence_out)


def _array_data(context, builder, array_type, array):
    """The data pointer of a Numba array value, in an ``@intrinsic``."""
    return context.make_array(array_type)(context, builder, array).data


def _i64(k):
    return ir.Constant(ir.IntType(64), k)


def _or(builder, *words):
    word = words[0]
    for other in words[1:]:
        word = builder.or_(word, other)
    return word


def _and(builder, *words):
    word = words[0]
    for other in words[1:]:
        word = builder.and_(word, other)
    return word


def _bit_map(lanes, flags):
    """Flags of two vectors (positions p .. p + 31 and p + 32 .. p + 63) as one i64 IR
    value: one kunpckdq and one kmovq."""
    both = lanes.shuffle(flags[0].value, flags[1].value, range(2 * lanes.count))
    return lanes.builder.bitcast(both, ir.IntType(64))


def _fits_wide_lanes(base_vocab_size, *tables):
    """Whether wide steps run: the codec's ids (and so every id below base_vocab_size)
    are below 0xFFFF, the largest value of a 16-bit lane, which stands for every id at
    or above it; and the CPU permutes 16-bit lanes (AVX-512BW: without it LLVM spells
    out the 32-lane compress lane by lane, slower than two 16-lane steps) and has BMI2's
    pdep (the wide decoding step's keep masks; every AVX-512BW CPU has it)."""
    fits = max([base_vocab_size, *(int(t.max()) for t in tables)]) < 0xFFFF
    return fits and can_permute(WIDE_LANES, 16) and can_deposit()


def _lane_table(derive, *tables):
    """``derive(*tables)``, kept for tables seen before: deriving and checking a layout
    table costs ~80 us, most of a short call."""
    return _lane_table_of(derive, *(np.ascontiguousarray(t, dtype=np.uint32).tobytes()
                                    for t in tables))


@functools.lru_cache(maxsize=32)
def _lane_table_of(derive, *table_bytes):
    return derive(*(np.frombuffer(raw, dtype=np.uint32) for raw in table_bytes))


# --- the encoding step ---------------------------------------------------------------

# What the encoding step knows of the id layout, from the policy's tables
# (``_encode_lane_table`` derives it and checks that the tables have this shape):
# 11 ints = lead-byte bits (bit b for 0xE0 + b), the prefix id of each lead-byte quad
# (0xE0-0xE3, ...), the value id of hi value (t << 7) | 0x40 for t = 0..3 (the
# next 31 hi values follow it), of lo value (s << 8) | 0x80 for s = 0, 1 (63 follow).
_LEAD_BITS, _QUAD_PREFIX, _HI_FIRST, _LO_FIRST = 0, 1, 5, 9


def _encode_lane_table(lead_prefix_ids, value_ids):
    """The encoding step's layout table (11 ints); ValueError if the tables do not fit it."""
    leads = np.flatnonzero(lead_prefix_ids)
    quads = (leads >> 2) & 3
    table = np.zeros(11, dtype=np.uint32)
    table[_LEAD_BITS] = np.bitwise_or.reduce(1 << (leads - 0xE0), initial=0)
    table[_QUAD_PREFIX + quads] = lead_prefix_ids[leads]
    table[_HI_FIRST : _HI_FIRST + 4] = value_ids[(np.arange(4) << 7) | 0x40]
    table[_LO_FIRST : _LO_FIRST + 2] = value_ids[(np.arange(2) << 8) | 0x80]
    hi = (np.arange(4)[:, None] << 7) | 0x40 | np.arange(32)
    lo = (np.arange(2)[:, None] << 8) | 0x80 | np.arange(64)
    fits = (
        leads.size > 0 and leads[0] >= 0xE0 and leads[-1] <= 0xEF
        and np.array_equal(lead_prefix_ids[leads], table[_QUAD_PREFIX + quads])
        and np.array_equal(value_ids[hi], table[_HI_FIRST : _HI_FIRST + 4, None] + np.arange(32))
        and np.array_equal(value_ids[lo], table[_LO_FIRST : _LO_FIRST + 2, None] + np.arange(64))
    )
    if not fits:
        raise ValueError("lead_prefix_ids / value_ids do not follow the layout of DESIGN §3 "
                         "(one prefix id per lead-byte quad of 0xE0-0xEF, value ids consecutive "
                         "over each run of hi and lo values): build them with gpubpe.bitlevel")
    return tuple(int(word) for word in table)  # constants of the compiled step


def _select_of(lanes, word, entries):
    """Lanes picking ``entries[k]`` (splatted IR values) where ``word`` holds k."""
    picked = entries[-1]
    for k in range(len(entries) - 2, -1, -1):
        picked = word.eq(k).select(entries[k], picked)
    return picked


def _encode_tables(lanes, layout):
    """Tables of the lane number for ``permuted`` (AVX-512 only): lane b & 31 of the first
    holds the prefix id of lead byte b (0 for a byte outside the set); lane t of the second
    the value id of hi value (t << 7) | 0x40; lane s & 1 of the third that of lo value
    (s << 8) | 0x80 (the values after each follow it)."""
    numbers = lanes.lane_numbers()
    quad_prefix = _select_of(lanes, (numbers >> 2) & 3, layout[_QUAD_PREFIX : _QUAD_PREFIX + 4])
    leads = (numbers & 15).bit(layout[_LEAD_BITS]) & numbers.lt(16)
    hi_table = _select_of(lanes, numbers & 3, layout[_HI_FIRST : _HI_FIRST + 4])
    lo_table = (numbers & 1).ne(0).select(layout[_LO_FIRST + 1], layout[_LO_FIRST])
    return leads.select(quad_prefix, 0), hi_table, lo_table


def _encode_lanes(lanes, ids_at, layout, n_in_span, cut, base, permute):
    """What positions p .. p + 15 write (``ids_at(k)`` gives ids[p + k : p + k + 16];
    bit EDGE + k of ``cut``, an i64 IR value, is set where a sequence starts at p + k):
    (coded ids, which of them are kept, which positions hold a bad id).

    Character starts are worked out twice, at p + lane and at p + lane - 3; those one and
    two positions back are shuffled from the two (a quarter of the step's work each).
    """
    builder = lanes.builder
    # bit EDGE + k: a sequence starts at p + k + 1 or p + k + 2
    blocked = builder.or_(builder.lshr(cut, _i64(1)), builder.lshr(cut, _i64(2)))

    if permute:  # tables of the lane number (hoisted out of the loop), looked up in one step
        prefix_table, hi_table, lo_table = _encode_tables(lanes, layout)

    def char_prefix(d):  # the prefix id of a character starting at p + lane + d, else 0
        b1, b2, b3 = ids_at(d), ids_at(d + 1), ids_at(d + 2)
        continues = ((b2 ^ 0x80) | (b3 ^ 0x80)).lt(0x40)
        inside = ~lanes.flags_of_bits(blocked, EDGE + d)
        if permute:
            return ((b1 & ~15).eq(0xE0) & continues & inside).select(
                lanes.permuted(prefix_table, b1), 0)
        is_lead = (b1 >> 4).eq(0xE) & (b1 & 15).bit(layout[_LEAD_BITS])
        prefix_id = _select_of(lanes, (b1 >> 2) & 3, layout[_QUAD_PREFIX : _QUAD_PREFIX + 4])
        return (is_lead & continues & inside).select(prefix_id, 0)

    here, back3 = char_prefix(0), char_prefix(-3)
    back1, back2 = here.shifted_up(back3, 1, 3), here.shifted_up(back3, 2, 3)
    before, x = ids_at(-1), ids_at(0)
    if permute:
        hi_ids = lanes.permuted(hi_table, before) + ((x >> 1) & 31)
        lo_ids = lanes.permuted(lo_table, before) + (x & 63)
    else:
        hi_ids = _select_of(lanes, before & 3, layout[_HI_FIRST : _HI_FIRST + 4]) \
            + ((x >> 1) & 31)
        lo_ids = (before & 1).ne(0).select(layout[_LO_FIRST + 1], layout[_LO_FIRST]) + (x & 63)
    starts = here.ne(0)
    coded = starts.select(here, back1.ne(0).select(hi_ids, back2.ne(0).select(lo_ids, x)))
    repeats_prefix = starts & here.eq(back3) & ~lanes.flags_of_bits(cut, EDGE)
    in_span = lanes.lane_numbers().lt(n_in_span)
    keep = in_span & ~repeats_prefix
    bad = in_span & (here | back1 | back2).eq(0) & x.ge(base)
    return coded, keep, bad


@intrinsic
def _encode_step(typingctx, ids, p, n_in_span, cut, layout, base, out, o):
    """Encode positions p .. p + 15 in 32-bit lanes (the first ``n_in_span`` are in the
    chunk) into out[o:]; ``cut`` = ``_cut_window`` at p. Returns (ids written, bad-id bits,
    kept bits). Reads ids[p - 3 : p + 18] and writes out[o : o + 16].
    """
    def codegen(context, builder, signature, args):
        ids_v, p_v, n_in_span_v, cut_v, layout_v, base_v, out_v, o_v = args
        lanes = LaneBuilder(builder, LANES, 32)
        ids_data = _array_data(context, builder, signature.args[0], ids_v)
        layout_words = [lanes.splat(builder.extract_value(layout_v, k))
                        for k in range(len(signature.args[4]))]

        def ids_at(k):
            return lanes.load(ids_data, builder.add(p_v, _i64(k)))

        coded, keep, bad = _encode_lanes(lanes, ids_at, layout_words, lanes.splat(n_in_span_v),
                                         cut_v, lanes.splat(base_v), can_permute(LANES, 32))
        lanes.store_kept(coded, keep, _array_data(context, builder, signature.args[6], out_v),
                         o_v)
        return context.make_tuple(builder, signature.return_type,
                                  [lanes.count_of(keep), bad.bits(), keep.bits()])
    return_type = types.UniTuple(types.int64, 3)
    return return_type(ids, p, n_in_span, cut, layout, base, out, o), codegen


def _wide_encode_flags(lanes, halves, starts_here, carried, ids_data, p, base, layout):
    """The wide step's character starts as bit maps in i64 IR values (bit k: position
    p + k, k < 64): the ids are classified in 16-bit lanes (lead byte of the set,
    continuation byte, the two bits of a lead byte's quad, id >= base), the flags moved to
    general-purpose registers and combined there with shifts, the shift of a bit map
    standing for the cross-lane shuffle of a vector. ``halves``: the Lanes of positions
    p .. p + 31 and p + 32 .. p + 63; ``starts_here`` = (bits of the sequence starts at
    p .. p + 63, at p + 64 and p + 65); ``carried`` = the start and quad bits of
    p - 3 .. p - 1 (bits 0-2). Returns (prefix ids where a character starts, else
    anything, for each half; starts; starts one and two back; kept bits; bad bits; what to
    carry to the next step)."""
    builder = lanes.builder
    prefix_table = _encode_tables(lanes, layout)[0]

    def shr(word, k):
        return builder.lshr(word, _i64(k))

    def shl(word, k):
        return builder.shl(word, _i64(k))

    def or_(*words):
        return _or(builder, *words)

    def and_(*words):
        return _and(builder, *words)

    def bit_map(flags_of):  # a flag of each position, as 64 bits
        return _bit_map(lanes, [flags_of(h, x) for h, x in enumerate(halves)])

    prefixes = [lanes.permuted(prefix_table, x) for x in halves]
    is_lead = bit_map(lambda h, x: (x & ~15).eq(0xE0) & prefixes[h].ne(0))
    continues = bit_map(lambda h, x: (x ^ 0x80).lt(0x40))
    quad_low = bit_map(lambda h, x: (x & 4).ne(0))
    quad_high = bit_map(lambda h, x: (x & 8).ne(0))
    at_or_above_base = bit_map(lambda h, x: x.ge(base))

    def is_continuation_at(k):  # ids[p + k] in 0x80-0xBF, as 0 or 1
        address = builder.gep(ids_data, [builder.add(p, _i64(k))])
        byte = builder.xor(builder.load(address, align=4), ir.Constant(ir.IntType(32), 0x80))
        flag = builder.icmp_unsigned("<", byte, ir.Constant(ir.IntType(32), 0x40))
        return builder.zext(flag, ir.IntType(64))

    continues_64, continues_65 = is_continuation_at(64), is_continuation_at(65)
    cut_here, cut_64, cut_65 = starts_here
    continues_1 = or_(shr(continues, 1), shl(continues_64, 63))  # bit k: p + k + 1
    continues_2 = or_(shr(continues, 2), shl(continues_64, 62), shl(continues_65, 63))
    blocked = or_(shr(cut_here, 1), shr(cut_here, 2), shl(cut_64, 63), shl(cut_64, 62),
                  shl(cut_65, 63))
    starts = and_(is_lead, continues_1, continues_2, builder.not_(blocked))
    carried_starts, carried_low, carried_high = (builder.extract_value(carried, k)
                                                 for k in range(3))
    back1 = or_(shl(starts, 1), shr(carried_starts, 2))
    back2 = or_(shl(starts, 2), shr(carried_starts, 1))
    back3 = or_(shl(starts, 3), carried_starts)

    def differs_from_back3(bits, carried_bits):
        return builder.xor(bits, or_(shl(bits, 3), carried_bits))

    other_quad = or_(differs_from_back3(quad_low, carried_low),
                     differs_from_back3(quad_high, carried_high))
    repeats = and_(starts, back3, builder.not_(or_(other_quad, cut_here)))
    kept = builder.not_(repeats)
    bad = and_(at_or_above_base, builder.not_(or_(starts, back1, back2)))
    carry = [shr(word, 61) for word in (starts, quad_low, quad_high)]
    return prefixes, starts, back1, back2, kept, bad, carry


@intrinsic
def _encode_wide_step(typingctx, ids, p, starts_here, layout, base, carried, out, o):
    """Encode positions p .. p + 63 into out[o:] in two vectors of 16-bit lanes;
    ``starts_here`` = the sequence starts at p .. p + 63 (bit k: p + k), at p + 64 and at
    p + 65 (``_starts_ahead``); ``carried`` = (start bits, quad bits low, quad bits high) of
    p - 3 .. p - 1 (``_encode_carry``, or what the step before returned). Returns (ids
    written, bits of the positions holding an id >= base outside a character, kept bits,
    what to carry). Where any bad bit is set (an id >= base, also every id a 16-bit lane
    cannot hold) what was written is not the encoding: the caller redoes the positions in
    32-bit lanes. Reads ids[p - 1 : p + 66], writes out[o : o + 64].

    One narrowing load of the ids; the character starts are bit maps (one bit a
    position) shifted in general-purpose registers, so the step shuffles its vectors
    once (the ids one position back), where working out the starts on shifted views
    of the ids took five cross-lane shuffles and a second start computation; and the
    bit maps hold 64 positions, so their work is shared by two vectors.
    """
    def codegen(context, builder, signature, args):
        ids_v, p_v, starts_here_v, layout_v, base_v, carried_v, out_v, o_v = args
        if not can_permute(WIDE_LANES, 16):  # never runs there (``wide`` is false)
            nothing = [_i64(0), _i64(-1), _i64(0), context.make_tuple(
                builder, signature.return_type[3], [_i64(0)] * 3)]
            return context.make_tuple(builder, signature.return_type, nothing)
        lanes = LaneBuilder(builder, WIDE_LANES, 16)
        ids_data = _array_data(context, builder, signature.args[0], ids_v)
        layout_words = [lanes.splat(builder.extract_value(layout_v, k))
                        for k in range(len(signature.args[3]))]
        halves = [lanes.load(ids_data, builder.add(p_v, _i64(WIDE_LANES * h))) for h in (0, 1)]
        before = builder.load(builder.gep(ids_data, [builder.sub(p_v, _i64(1))]), align=4)
        befores = [halves[0].shifted_up(lanes.splat(before), 1),  # ids[p - 1 + lane]
                   halves[1].shifted_up(halves[0], 1, WIDE_LANES)]  # (bytes where used)
        starts_here = [builder.extract_value(starts_here_v, k) for k in range(3)]
        prefixes, starts, back1, back2, kept, bad, carry = _wide_encode_flags(
            lanes, halves, starts_here, carried_v, ids_data, p_v, lanes.splat(base_v),
            layout_words)
        _, hi_table, lo_table = _encode_tables(lanes, layout_words)
        out_data = _array_data(context, builder, signature.args[6], out_v)
        at = o_v
        for h, (x, x_before) in enumerate(zip(halves, befores)):
            hi_ids = lanes.permuted(hi_table, x_before) + ((x >> 1) & 31)
            lo_ids = lanes.permuted(lo_table, x_before) + (x & 63)
            flags = [_half_flags(lanes, word, h) for word in (starts, back1, back2, kept)]
            coded = flags[0].select(prefixes[h], flags[1].select(hi_ids,
                                                                 flags[2].select(lo_ids, x)))
            lanes.store_kept(coded, flags[3], out_data, at)
            at = builder.add(at, lanes.count_of(flags[3]))
        return context.make_tuple(builder, signature.return_type, [
            builder.sub(at, o_v), bad, kept,
            context.make_tuple(builder, signature.return_type[3], carry)])
    carried_type = types.UniTuple(types.int64, 3)
    return_type = types.Tuple((types.int64, types.int64, types.int64, carried_type))
    return return_type(ids, p, starts_here, layout, base, carried, out, o), codegen


def _half_flags(lanes, word, half):
    """Flags of lanes from bits half * count .. of a 64-bit IR value (a kmovq, then a
    kshiftrq for the upper half)."""
    flags = lanes.builder.bitcast(word, ir.VectorType(ir.IntType(1), 64))
    order = range(half * lanes.count, (half + 1) * lanes.count)
    return Flags(lanes, lanes.shuffle(flags, flags, order))


@njit(inline="always", cache=True)
def _starts_ahead(cuts, p):
    """The sequence starts a wide encoding step at p reads: (bit k set where one starts at
    p + k, k < 64; whether one starts at p + 64; at p + 65)."""
    here, ahead = _cut_window(cuts, p), _cut_window(cuts, p + WIDE_LANES)
    edge = np.uint64(EDGE)
    bits = (here >> edge) | ((ahead >> edge) << np.uint64(WIDE_LANES))
    return (np.int64(bits), np.int64((ahead >> np.uint64(EDGE + WIDE_LANES)) & np.uint64(1)),
            np.int64((ahead >> np.uint64(EDGE + WIDE_LANES + 1)) & np.uint64(1)))


@njit(inline="always", cache=True)
def _starts_char_at(ids, cuts, q, lead_bits):
    """Whether a character of the lead set starts at q (0 <= q, q + 2 < len(ids)), for
    ``_encode_carry``: the wide step's test, one position."""
    x = np.int64(ids[q])
    return ((x >> 4) == 0xE and (lead_bits >> (x & 15)) & 1 == 1
            and is_continuation(ids[q + 1]) and is_continuation(ids[q + 2])
            and not _is_cut(cuts, q + 1) and not _is_cut(cuts, q + 2))


@njit(inline="always", cache=True)
def _is_cut(cuts, q):
    bit = q + _CUT_MARGIN
    return (cuts[bit >> 6] >> np.uint64(bit & 63)) & np.uint64(1) == 1


@njit(cache=True)
def _encode_carry(ids, cuts, p, lead_bits):
    """What a wide encoding step at p takes from the positions before it (p >= 3): bit
    k of each word for position p - 3 + k, a character starts there; the lead byte's bit
    2; its bit 3. For the first wide step of a run (the steps before were 32-bit ones)."""
    starts, low, high = 0, 0, 0
    for k in range(3):
        q = p - 3 + k
        x = np.int64(ids[q])
        starts |= np.int64(_starts_char_at(ids, cuts, q, lead_bits)) << k
        low |= ((x >> 2) & 1) << k
        high |= ((x >> 3) & 1) << k
    return starts, low, high


@njit(nogil=True, cache=True)
def _encode_chunk(ids, offsets, cuts, chunk, bounds, source, layout, base, wide, out,
                  sequence_out):
    """Encode chunk ``chunk`` into out[source:] across sequence ends, 64 positions a step
    in 16-bit lanes where ``wide`` (the codec's ids fit) and no id is bad, else 16 in
    32-bit lanes; record where its sequences begin. Writes up to WIDE_ENCODE_POSITIONS
    ids past its output only where its input is that much longer."""
    start, stop = bounds[chunk], bounds[chunk + 1]
    p, o = start, source
    sequence = np.searchsorted(offsets, start) - 1
    first_bad = -1
    scratch = np.zeros(_EDGE_SCRATCH, dtype=np.uint32)
    carried = (np.int64(0), np.int64(0), np.int64(0))
    carried_at = -1  # the position ``carried`` was worked out for
    lead_bits = np.int64(layout[_LEAD_BITS])
    # wide steps run from p where WIDE_ENCODE_REACH[0] <= p <= last_wide
    last_wide = min(stop, ids.size - WIDE_ENCODE_REACH[1] + WIDE_ENCODE_POSITIONS) \
        - WIDE_ENCODE_POSITIONS
    while p < stop:
        if wide and WIDE_ENCODE_REACH[0] <= p <= last_wide:
            if carried_at != p:
                carried = _encode_carry(ids, cuts, p, lead_bits)
            bad = 0
            while p <= last_wide:  # a loop of its own: its values stay in registers
                starts_here = _starts_ahead(cuts, p)
                written, bad, kept, carry = _encode_wide_step(ids, p, starts_here, layout,
                                                              base, carried, out, o)
                if bad != 0:
                    break
                sequence = _record_wide_starts(offsets, sequence, starts_here[0], kept, p, o,
                                               chunk, sequence_out)
                p, o, carried = p + WIDE_ENCODE_POSITIONS, o + written, carry
            carried_at = p
            if bad == 0:
                continue
        cut = _cut_window(cuts, p)
        n_in_span = min(stop - p, LANES)
        if _needs_edge_copy(p, ids.size, ENCODE_REACH):
            _edge_copy(ids, p, scratch)
            written, bad, kept = _encode_step(scratch, EDGE, n_in_span, cut, layout, base, out,
                                              o)
        else:
            written, bad, kept = _encode_step(ids, p, n_in_span, cut, layout, base, out, o)
        sequence = _record_sequence_starts(offsets, sequence, p + n_in_span, o, kept, 1, p,
                                           chunk, sequence_out)
        if bad != 0 and first_bad < 0:
            first_bad = p + np.int64(_trailing_zeros(np.uint64(bad)))
        p, o = p + LANES, o + written
    return o - source, first_bad


def bitlevel_encode_cpu(ids, offsets, lead_prefix_ids, value_ids, base_vocab_size,
                        n_chunks=1, run=_one_by_one):
    """Encode with Numba: vector steps over each chunk of positions, the chunks (up to
    ``n_chunks``: fewer for short inputs) run by ``run(function, calls)`` (a list of
    results in order: the caller's threads, or one after another).

    Returns ``(out_ids, out_offsets, first_bad)`` like ``bitlevel_encode_numpy``.
    Scratch: an output buffer of len(ids) + 16 ids per chunk (returned, trimmed, when
    one chunk ran).
    """
    layout = _lane_table(_encode_lane_table, lead_prefix_ids, value_ids)
    bounds = _plan_chunks(ids, offsets, _chunk_count(ids.size, n_chunks), False,
                          lead_prefix_ids, base_vocab_size, 0)
    sources = _chunk_sources(bounds, 1)
    out = np.empty(ids.size + LANES * sources.size, dtype=np.uint32)  # NumPy: huge pages
    wide = _fits_wide_lanes(base_vocab_size, lead_prefix_ids, value_ids)
    chunk_lengths, chunk_first_bad, sequence_out = _encode_chunks(
        ids, offsets, bounds, sources, layout, base_vocab_size, wide, out, run)
    joined, out_offsets = _join_chunks(out, sources, chunk_lengths, sequence_out, offsets,
                                       bounds, run)
    return joined, out_offsets, _first_found(chunk_first_bad)


def _encode_chunks(ids, offsets, bounds, sources, layout, base_vocab_size, wide, out, run):
    """Run ``_encode_chunk`` on every chunk (through ``run``); gather what each one reports."""
    n_chunks = bounds.size - 1
    sequence_out = np.full(offsets.size + n_chunks, -1, dtype=np.int64)  # + spare slots
    cuts = _cut_map(offsets, ids.size)
    reports = np.array(run(_encode_chunk, [
        (ids, offsets, cuts, c, bounds, sources[c], layout, base_vocab_size, wide, out,
         sequence_out) for c in range(n_chunks)]), dtype=np.int64).reshape(n_chunks, 2)
    return reports[:, 0], reports[:, 1], sequence_out


# --- the decoding step ---------------------------------------------------------------

# What the decoding step knows of the id layout (``_decode_lane_table`` derives it from
# the decode table and checks that the table has this shape): 4 ints = for each
# run of 32 value ids (k >> 5 of id base + k), its first value >> 5 in 4 bits; bit
# k >> 5 set for runs of hi values; for each prefix id, its prefix - 0x38 in 2 bits;
# the number of prefix ids; then each run's first value >> 5 again, one word each (for
# 16-bit lanes, which cannot shift the packed word).
_RUN_VALUES, _RUN_IS_HI, _PREFIX_VALUES, _N_PREFIXES, _RUN_VALUE_OF = 0, 1, 2, 3, 4
_NONE, _UNSEEN = 1, 0  # the decoding step's "no prefix in force", "no event yet" (prefixes
# are 0x38-0x3B)


def _decode_lane_table(decode_table):
    """The decoding step's layout table (12 ints); ValueError if the table does not fit it."""
    kinds, payloads = decode_table >> 16, decode_table & 0xFFFF
    n_prefixes = decode_table.size - N_VALUE_IDS
    run_values = payloads[:N_VALUE_IDS:32] >> 5
    run_kinds = kinds[:N_VALUE_IDS:32]
    prefixes = payloads[N_VALUE_IDS:].astype(np.int64) - 0x38
    k = np.arange(min(decode_table.size, N_VALUE_IDS))
    fits = (
        0 <= n_prefixes <= 4 and run_values.size == 8
        and np.array_equal(payloads[:N_VALUE_IDS], (run_values[k >> 5] << 5) | (k & 31))
        and np.array_equal(kinds[:N_VALUE_IDS], run_kinds[k >> 5])
        and np.all((run_kinds == KIND_HI) | (run_kinds == KIND_LO))
        and np.all(kinds[N_VALUE_IDS:] == KIND_PREFIX) and np.all((prefixes >= 0) & (prefixes < 4))
    )
    if not fits:
        raise ValueError("decode_table does not follow the layout of DESIGN §3 (256 value ids "
                         "in runs of 32 consecutive values, then up to 4 prefix ids of lead "
                         "bytes 0xE0-0xEF): build it with gpubpe.bitlevel")
    table = np.zeros(_RUN_VALUE_OF + 8, dtype=np.uint32)
    table[_RUN_VALUE_OF:] = run_values
    table[_RUN_VALUES] = np.bitwise_or.reduce(run_values.astype(np.int64) << (4 * np.arange(8)))
    table[_RUN_IS_HI] = np.bitwise_or.reduce((run_kinds == KIND_HI) << np.arange(8))
    table[_PREFIX_VALUES] = np.bitwise_or.reduce(prefixes << (2 * np.arange(n_prefixes)),
                                                 initial=0)
    table[_N_PREFIXES] = n_prefixes
    return tuple(int(word) for word in table)  # constants of the compiled step


# The decoding step's classes of id, one bit each so that its checks are bit logic on
# lanes (mask-register logic runs on one port and was the step's bottleneck).
_HI, _LO, _PREFIX, _PLAIN, _INVALID = 1, 2, 4, 8, 16


def _classes(lanes, x, layout, base, permute):
    """(class of each id, its 9-bit value where it is a value id, the prefix - 0x38 + 0x38
    where it is a prefix id). With ``permute``, one table lookup gives a value id's run
    (first value and class) and one a prefix id's prefix."""
    index = x - base
    run = (index >> 5) & 7
    is_prefix = (index - N_VALUE_IDS).lt(layout[_N_PREFIXES])
    other_class = x.lt(base).select(_PLAIN, is_prefix.select(_PREFIX, _INVALID))
    if permute:  # tables of the lane number, hoisted out of the loop
        numbers = lanes.lane_numbers()
        run_classes = (((layout[_RUN_IS_HI] >> (numbers & 7)) & 1) ^ 1) + _HI
        runs = (_select_of(lanes, numbers & 7, layout[_RUN_VALUE_OF : _RUN_VALUE_OF + 8]) << 5) \
            | (run_classes << 12)
        prefixes = ((layout[_PREFIX_VALUES] >> ((numbers & 3) << 1)) & 3) + 0x38
        entry = lanes.permuted(runs, index >> 5)
        value_class, value = entry >> 12, (entry & 0x1E0) | (index & 31)
        payload = lanes.permuted(prefixes, index)  # ids base + 256 + k: lane k (k < 4)
    else:
        value_class = (((layout[_RUN_IS_HI] >> run) & 1) ^ 1) + _HI  # _HI or _LO
        first_of_run = _select_of(lanes, run, layout[_RUN_VALUE_OF : _RUN_VALUE_OF + 8])
        value = (first_of_run << 5) | (index & 31)
        payload = ((layout[_PREFIX_VALUES] >> (((index - N_VALUE_IDS) & 3) << 1)) & 3) + 0x38
    return index.lt(N_VALUE_IDS).select(value_class, other_class), value, payload


def _last_prefix_seen(is_event, event_prefix):
    """The "last prefix seen" scan over the lanes: at each lane the prefix set by the last
    event at or before it, _UNSEEN if there is none. Rounds of doubling (4 for 16 lanes);
    none of it waits on the previous step (its prefix is put in afterwards), so steps
    overlap."""
    seen = is_event.select(event_prefix, _UNSEEN)
    for distance in (1, 2, 4, 8, 16)[: is_event.lanes.count.bit_length() - 1]:
        seen = seen.ne(_UNSEEN).select(seen, seen.shifted_up(_UNSEEN, distance))
    return seen


def _decode_lanes(lanes, x, layout, n_in_span, cut, base, carried, permute):
    """What ids x = ids[p : p + count] decode to: (first id, second id, how many of the two
    each position writes, malformed bits, last prefix seen, classes, 9-bit values).

    A base id writes itself, a hi id the lead byte, a lo id the middle and last bytes
    (the middle one from the hi value before it); a prefix id writes nothing.
    Positions from ``n_in_span`` on are outside the chunk and taken as base ids; bit
    EDGE + k of ``cut`` (an i64 IR value) is set where a sequence starts at p + k: no prefix is in force
    there and no unit may be open before it.
    ``carried`` = (prefix in force before p, class and value of ids[p - 1]): a unit that
    starts at p + 15 is finished, and checked, by the next step. Each check looks at a
    position and the one before it, on one-bit classes, so all of them are a few
    logic operations on whole vectors.
    """
    prefix_before, class_before, value_before = carried
    in_span = lanes.lane_numbers().lt(n_in_span)
    starts_sequence = lanes.flags_of_bits(cut, EDGE)
    klass, value, payload = _classes(lanes, x, layout, base, permute)
    klass = in_span.select(klass, _PLAIN)
    before_in_sequence = klass.shifted_up(class_before, 1)
    before = starts_sequence.select(_PLAIN, before_in_sequence)
    event_prefix = (klass & _PREFIX).ne(0).select(payload, _NONE)
    seen = _last_prefix_seen((klass & (_HI | _LO)).eq(0) | starts_sequence, event_prefix)
    prefix = seen.eq(_UNSEEN).select(prefix_before, seen)
    bad = (
        ((klass >> 1) ^ before)  # a lo id right after each hi id, and only there
        | (klass & ~(prefix >> 3))  # a prefix in force at a hi id (0x38-0x3B; _NONE is 1)
        | ((before >> 2) & ~klass)  # a hi id right after each prefix id
    ) & 1 | (klass >> 4)  # no id past the codec's
    left_open = starts_sequence.select(before_in_sequence & (_HI | _PREFIX), 0)  # at its end
    hi_value = value.shifted_up(value_before, 1)
    lead = (prefix << 2) | (value >> 7)
    middle = ((hi_value & 0x7F) << 1) | (value >> 8)
    first = klass.eq(_PLAIN).select(x, klass.eq(_HI).select(lead, middle))
    written = (klass & (_HI | _LO)) | ((klass >> 3) & 1)  # hi 1, lo 2, prefix 0, plain 1
    return (first, value & 0xFF, in_span.select(written, 0), (bad | left_open).ne(0).bits(),
            seen, klass, value)


@intrinsic
def _decode_step(typingctx, ids, p, n_in_span, cut, layout, base, carried, out, o):
    """Decode ids[p : p + LANES] (the first ``n_in_span`` are in the chunk) into
    out[o:]; ``cut`` = ``_cut_window`` at p, ``carried`` as ``_decode_lanes`` takes it.
    Returns (ids written, malformed bits, what to carry to the next step, kept bits:
    2k and 2k + 1 for the two ids position p + k may write). Reads ids[p : p + LANES],
    writes out[o : o + 2 * LANES]. Where a bit of "malformed" is set what was written
    is not the decoding (the caller redoes those positions)."""
    def codegen(context, builder, signature, args):
        ids_v, p_v, n_in_span_v, cut_v, layout_v, base_v, carried_v, out_v, o_v = args
        lanes = LaneBuilder(builder)
        layout_words = [lanes.splat(builder.extract_value(layout_v, k))
                        for k in range(len(signature.args[4]))]
        carried = [lanes.splat(builder.extract_value(carried_v, k)) for k in range(3)]
        x = lanes.load(_array_data(context, builder, signature.args[0], ids_v), p_v)
        first, last, written, malformed, seen, klass, value = _decode_lanes(
            lanes, x, layout_words, lanes.splat(n_in_span_v), cut_v, lanes.splat(base_v),
            carried, can_permute(LANES, 32))
        out_data = _array_data(context, builder, signature.args[7], out_v)
        second_of_pair = lanes.constants([0, 1] * (LANES // 2))
        counts, kept = [], []
        for half in (0, 1):  # the first half of the positions, then the second: the
            # first and second ids of each in turn
            keep = second_of_pair.lt(lanes.interleaved(written, written, half))
            at = builder.add(o_v, counts[0]) if counts else o_v
            lanes.store_kept(lanes.interleaved(first, last, half), keep, out_data, at)
            counts.append(lanes.count_of(keep))
            kept.append(keep.bits())
        seen_last = builder.zext(seen.last(), ir.IntType(64))
        prefix_after = builder.select(builder.icmp_unsigned("==", seen_last,
                                                            _i64(_UNSEEN)),
                                      builder.extract_value(carried_v, 0), seen_last)
        carry = [prefix_after] + [builder.zext(v.last(), ir.IntType(64))
                                  for v in (klass, value)]
        return context.make_tuple(builder, signature.return_type, [
            builder.add(*counts), malformed,
            context.make_tuple(builder, signature.return_type[2], carry),
            builder.or_(kept[0], builder.shl(kept[1], _i64(LANES)))])
    carried_type = types.UniTuple(types.int64, 3)
    return_type = types.Tuple((types.int64, types.int64, carried_type, types.int64))
    return return_type(ids, p, n_in_span, cut, layout, base, carried, out, o), codegen


# The wide decoding step: 64 positions in two vectors of 16-bit lanes. The classes of
# the ids are bit maps (bit k: position p + k) in general-purpose registers, where the
# checks are shifts and logic on 64-bit words, and the "last prefix seen" scan is an
# addition (``_filled``): the carry of ``runs + heads`` runs through each run of
# positions that keeps the prefix bit of the event that heads it. The 16-lane step
# scans by rounds of shuffles on vectors (``_last_prefix_seen``).


def _filled(builder, events, heads, carried_in):
    """Bit k set where the last event at or before position p + k is one of ``heads``
    (a subset of ``events``), or where no event is (bit 0 of ``carried_in``: the state
    before p). Adding the heads to the runs (the positions that are not events, and the
    heads) carries through each run from a head, or from bit 0 with ``carried_in``, up to
    the next event that is not a head: the bits the sum clears are those filled, the
    heads after the first of a run stay set in it and are put back."""
    runs = builder.or_(builder.not_(events), heads)
    total = builder.add(builder.add(runs, heads), carried_in)
    return builder.or_(builder.and_(runs, builder.not_(total)), heads)


def _wide_decode_classes(lanes, x, layout, base):
    """The flags of each id's class (hi, lo, prefix, plain), of the two bits of its
    prefix (prefix - 0x38, where it is a prefix id), and its 9-bit value (where it is a
    value id). One vpermw looks up a value id's run (first value, hi or lo), one a
    prefix id's prefix; the tables of the lane number are hoisted out of the loop."""
    numbers = lanes.lane_numbers()
    index = x - base
    run_is_hi = ((layout[_RUN_IS_HI] >> (numbers & 7)) & 1) << 12
    runs = (_select_of(lanes, numbers & 7, layout[_RUN_VALUE_OF : _RUN_VALUE_OF + 8]) << 5) \
        | run_is_hi
    entry = lanes.permuted(runs, index >> 5)
    in_hi_run = (entry & 0x1000).ne(0)
    is_value = index.lt(N_VALUE_IDS)
    prefix_bits = lanes.permuted((layout[_PREFIX_VALUES] >> ((numbers & 3) << 1)) & 3, index)
    flags = {"hi": is_value & in_hi_run, "lo": is_value & ~in_hi_run,
             "prefix": (index - N_VALUE_IDS).lt(layout[_N_PREFIXES]), "plain": x.lt(base),
             "bit0": (prefix_bits & 1).ne(0), "bit1": (prefix_bits & 2).ne(0)}
    return flags, (entry & 0x1E0) | (index & 31)


def _wide_decode_bits(builder, maps, starts, carried):
    """The bit maps of a wide decoding step: (the prefix in force, its two bits, and
    malformed positions), from the class maps, the sequence starts and ``carried`` (IR
    values: prefix in force before p, class of ids[p - 1]).

    The checks are those of ``_decode_lanes``: a lo id right after each hi id of its
    sequence and only there, a prefix in force at each hi id, a hi id right after each
    prefix id, no unit left open before a sequence start, no id past the codec's."""
    hi, lo, prefix, plain = maps["hi"], maps["lo"], maps["prefix"], maps["plain"]
    prefix_before, class_before = carried

    def carried_flag(predicate, value, constant):
        return builder.zext(builder.icmp_unsigned(predicate, value, _i64(constant)),
                            ir.IntType(64))

    def shl(word, k):
        return builder.shl(word, _i64(k))

    has_before = carried_flag("!=", prefix_before, _NONE)
    events = builder.or_(builder.not_(builder.or_(hi, lo)), starts)
    in_force = _filled(builder, events, prefix, has_before)
    bits = [_filled(builder, events, builder.and_(prefix, maps[f"bit{k}"]),
                    builder.and_(has_before, builder.lshr(prefix_before, _i64(k))))
            for k in (0, 1)]
    hi_back = builder.or_(shl(hi, 1), carried_flag("==", class_before, _HI))
    prefix_back = builder.or_(shl(prefix, 1), carried_flag("==", class_before, _PREFIX))
    inside = builder.not_(starts)
    bad = _or(
        builder,
        builder.xor(lo, builder.and_(hi_back, inside)),
        _and(builder, starts, builder.or_(hi_back, prefix_back)),
        builder.and_(hi, builder.not_(in_force)),
        _and(builder, prefix_back, inside, builder.not_(hi)),
        builder.not_(_or(builder, hi, lo, prefix, plain)),
    )
    return in_force, bits, bad


@intrinsic
def _decode_wide_step(typingctx, ids, p, starts, layout, base, carried, out, o):
    """Decode positions p .. p + 63 into out[o:] in two vectors of 16-bit lanes;
    ``starts``: bit k set where a sequence starts at p + k; ``carried`` as
    ``_decode_lanes`` takes it. Returns (ids written, malformed bits, what to carry, kept
    bits of positions p .. p + 31 (2k and 2k + 1: the two ids position p + k may write),
    the same of p + 32 .. p + 63, ids written by p .. p + 31). Reads ids[p : p + 64],
    writes out[o : o + 128 + 32]; where a malformed bit is set what was written is not the
    decoding (the caller redoes the positions). An id of 0xFFFF or more reads as 0xFFFF,
    past the codec's ids (``wide`` makes sure), so it is malformed too.

    A hi id writes the lead byte, the lo id after it the middle byte (from the hi value
    one lane back) and the last; each vector's first and second ids are interleaved
    into two vectors of 32 slots, compressed and stored, their keep masks put together by
    pdep from the bit maps."""
    def codegen(context, builder, signature, args):
        ids_v, p_v, starts_v, layout_v, base_v, carried_v, out_v, o_v = args
        if not (can_permute(WIDE_LANES, 16) and can_deposit()):  # (``wide`` is false there)
            nothing = [_i64(0), _i64(-1), context.make_tuple(
                builder, signature.return_type[2], [_i64(0)] * 3)] + [_i64(0)] * 3
            return context.make_tuple(builder, signature.return_type, nothing)
        lanes = LaneBuilder(builder, WIDE_LANES, 16)
        ids_data = _array_data(context, builder, signature.args[0], ids_v)
        layout_words = [lanes.splat(builder.extract_value(layout_v, k))
                        for k in range(len(signature.args[3]))]
        prefix_before, class_before, value_before = (builder.extract_value(carried_v, k)
                                                     for k in range(3))
        halves = [lanes.load(ids_data, builder.add(p_v, _i64(WIDE_LANES * h))) for h in (0, 1)]
        classes = [_wide_decode_classes(lanes, x, layout_words, lanes.splat(base_v))
                   for x in halves]
        maps = {name: _bit_map(lanes, [flags[name] for flags, _ in classes])
                for name in classes[0][0]}
        in_force, prefix_bits, bad = _wide_decode_bits(builder, maps, starts_v,
                                                       (prefix_before, class_before))
        kept_first = _or(builder, maps["hi"], maps["lo"], maps["plain"])
        out_data = _array_data(context, builder, signature.args[6], out_v)
        values = [value for _, value in classes]
        hi_values = [values[0].shifted_up(lanes.splat(value_before), 1),
                     values[1].shifted_up(values[0], 1, WIDE_LANES)]
        at, kept, written = o_v, [], []
        for h, ((flags, value), x) in enumerate(zip(classes, halves)):
            lead = (value >> 7) | 0xE0
            for k, word in enumerate(prefix_bits):
                lead = _half_flags(lanes, word, h).select(lead | (4 << k), lead)
            middle = ((hi_values[h] & 0x7F) << 1) | (value >> 8)
            first = flags["plain"].select(x, flags["hi"].select(lead, middle))
            slot_bits = builder.or_(
                lanes.deposit(builder.lshr(kept_first, _i64(WIDE_LANES * h)),
                              _i64(0x5555555555555555)),
                lanes.deposit(builder.lshr(maps["lo"], _i64(WIDE_LANES * h)),
                              _i64(-0x5555555555555556)))  # 0xAAAA...
            start = at
            for quarter in (0, 1):
                keep = lanes.flags_of_bits(slot_bits, WIDE_LANES * quarter)
                lanes.store_kept(lanes.interleaved(first, value & 0xFF, quarter), keep,
                                 out_data, at)
                at = builder.add(at, lanes.count_of(keep))
            kept.append(slot_bits)
            written.append(builder.sub(at, start))

        def last_bit(word):
            return builder.lshr(word, _i64(WIDE_DECODE_POSITIONS - 1))

        prefix_after = builder.select(
            builder.icmp_unsigned("!=", last_bit(in_force), _i64(0)),
            _or(builder, _i64(0x38), builder.shl(last_bit(prefix_bits[1]), _i64(1)),
                last_bit(prefix_bits[0])),
            _i64(_NONE))
        invalid = builder.not_(_or(builder, *(maps[k] for k in ("hi", "lo", "prefix", "plain"))))
        class_after = _or(builder, *(builder.mul(last_bit(word), _i64(k)) for word, k in (
            (maps["hi"], _HI), (maps["lo"], _LO), (maps["prefix"], _PREFIX),
            (maps["plain"], _PLAIN), (invalid, _INVALID))))
        carry = [prefix_after, class_after, builder.zext(values[1].last(), ir.IntType(64))]
        return context.make_tuple(builder, signature.return_type, [
            builder.sub(at, o_v), bad,
            context.make_tuple(builder, signature.return_type[2], carry),
            kept[0], kept[1], written[0]])
    carried_type = types.UniTuple(types.int64, 3)
    return_type = types.Tuple((types.int64, types.int64, carried_type, types.int64,
                               types.int64, types.int64))
    return return_type(ids, p, starts, layout, base, carried, out, o), codegen


@njit(inline="always", cache=True)
def _leaves_unit_open(carried):
    """Whether a step's last position begins a unit (a hi or a prefix id)."""
    return carried[1] == _HI or carried[1] == _PREFIX


@njit(cache=True)
def _redo_units(ids, offsets, sequence, p, stop, decode_table, base, out, o, carried, chunk,
                sequence_out):
    """Decode the units starting in [p, stop) one at a time, sequence by sequence, from
    the unit the step before left open, if any; record the sequences entered. Returns
    what ``_decode_chunk`` keeps (p, o, carried, sequence, malformed units, first one
    or -1)."""
    if _leaves_unit_open(carried):  # ids[p - 1]: a hi id wrote its lead byte, a prefix nothing
        p, o = p - 1, o - (1 if carried[1] == _HI else 0)
    prefix = carried[0]
    n_bad, first_bad = 0, -1
    while p < stop:
        entered = _enter_sequences(offsets, sequence, p, o, chunk, sequence_out)
        if entered != sequence:
            sequence, prefix = entered, np.int64(_NONE)
        sequence_stop = offsets[sequence + 1]
        p, o, prefix, run_bad, run_first_bad = _decode_units(
            ids, p, min(stop, sequence_stop), sequence_stop, decode_table, base, out, o, prefix)
        n_bad += run_bad
        if first_bad < 0:
            first_bad = run_first_bad
    return p, o, (prefix, np.int64(_PLAIN), np.int64(0)), sequence, n_bad, first_bad


@njit(cache=True)
def _decode_units(ids, start, stop, sequence_stop, decode_table, base, out, o, prefix):
    """Decode the units starting in [start, stop) one by one (``_decode_unit_at``), for
    steps with a malformed unit. ``prefix`` as in the vector step (``_NONE``: none).

    Returns (next input position, next output position, prefix in force, malformed
    units, first one or -1).
    """
    i, o = np.uint64(start), np.uint64(o)
    prefix = NO_PREFIX if prefix == _NONE else np.int64(prefix)
    n_bad, first_bad = 0, -1
    while i < stop:
        step, written, is_bad, prefix = _decode_unit_at(ids, i, sequence_stop, decode_table,
                                                        np.uint64(base), prefix, out, o)
        if is_bad:
            n_bad += 1
            if first_bad < 0:
                first_bad = np.int64(i)
        i += step
        o += written
    return (np.int64(i), np.int64(o), _NONE if prefix == NO_PREFIX else prefix, n_bad,
            first_bad)


@njit(cache=True)
def _decode_entry(x, decode_table, base):
    """The decode entry of id x (uint64 base): from the table, or PASS / INVALID."""
    index = np.uint64(x) - base  # wraps to a huge value for x < base
    if index < np.uint64(decode_table.size):
        return np.uint32(decode_table[index])
    return np.uint32(non_codec_entry(x, base))


@njit(cache=True)
def _decode_unit_at(ids, i, sequence_stop, decode_table, base, prefix, out, o):
    """Decode the unit starting at i: a base id, a prefix id, a character, or a malformed
    unit (written as U+FFFD), as ``decode_unit`` says.

    Returns (ids it spans, ids written, whether malformed, the prefix in force after).
    """
    entry = _decode_entry(ids[i], decode_table, base)
    kind = entry_kind(entry)
    next_entry = np.uint32(KIND_END << 16)
    if i + np.uint64(1) < sequence_stop:
        next_entry = _decode_entry(ids[i + np.uint64(1)], decode_table, base)
    next_kind = entry_kind(next_entry)
    if kind == KIND_PASS:
        out[o] = ids[i]
        return np.uint64(1), np.uint64(1), False, NO_PREFIX
    if kind == KIND_PREFIX:
        prefix = np.int64(entry_payload(entry))
    elif kind == KIND_INVALID:
        prefix = NO_PREFIX
    unit = decode_unit(kind, next_kind, prefix != NO_PREFIX, False)  # a hi takes its lo along
    if unit == UNIT_EMPTY:
        return np.uint64(1), np.uint64(0), False, prefix
    if unit == UNIT_CHAR:
        hi, lo = entry_payload(entry), entry_payload(next_entry)
        out[o] = lead_byte(prefix, hi)
        out[o + np.uint64(1)] = middle_byte(hi, lo)
        out[o + np.uint64(2)] = last_byte(lo)
        return np.uint64(2), np.uint64(3), False, prefix
    for k in range(3):
        out[o + np.uint64(k)] = REPLACEMENT_BYTES[k]
    spans_lo = kind == KIND_HI and next_kind == KIND_LO
    return (np.uint64(2) if spans_lo else np.uint64(1)), np.uint64(3), True, prefix


FAULT_IN_IDS = 1 << 21  # 8 MB of uint32 output: four transparent huge pages
_PAGE_IDS = 1024  # 4 KB


@njit(cache=True)
def _fault_in(out, touched, stop):
    """Write 0 once every 4 KB of out[touched : touched + FAULT_IN_IDS] (at most up to
    ``stop``), ahead of the decoding steps: their output's page faults then come in
    bursts of four huge pages, not one by one among the steps (decoding 16.3M real ids:
    1.10-1.12x; bursts of 2 / 4 / 16 / 32 MB: 1.01-1.03x / 1.06x / 1.08-1.10x / 1.06x).
    Returns how far out is touched now."""
    end = min(touched + FAULT_IN_IDS, stop)
    for i in range(touched, end, _PAGE_IDS):
        out[i] = 0
    return end


@njit(cache=True)
def _decode_wide_run(ids, offsets, cuts, chunk, p, last_wide, o, touched, region_stop, layout,
                     base, carried, out, sequence, sequence_out):
    """Wide decoding steps from p while p <= last_wide or until one finds a malformed
    unit; record the sequences they enter. Returns (p, o, carried, sequence, touched,
    malformed bits of the step that stopped, or 0)."""
    malformed = 0
    while p <= last_wide:
        if o + 2 * WIDE_DECODE_POSITIONS > touched:
            touched = _fault_in(out, max(touched, o), region_stop)
        starts = _cut_window(cuts, p + EDGE)  # bit k: p + k
        written, malformed, carry, kept, kept_after, written_before = \
            _decode_wide_step(ids, p, starts, layout, base, carried, out, o)
        if malformed != 0:
            break
        sequence = _record_sequence_starts(offsets, sequence, p + WIDE_LANES, o, kept, 2, p,
                                           chunk, sequence_out)
        sequence = _record_sequence_starts(offsets, sequence, p + 2 * WIDE_LANES,
                                           o + written_before, kept_after, 2, p + WIDE_LANES,
                                           chunk, sequence_out)
        p, o, carried = p + WIDE_DECODE_POSITIONS, o + written, carry
    return p, o, carried, sequence, touched, malformed


@njit(nogil=True, cache=True)
def _decode_chunk(ids, offsets, cuts, chunk, bounds, source, decode_table, layout, base, wide,
                  out, sequence_out):
    """Decode chunk ``chunk`` into out[source:] across sequence ends, 64 positions a step
    in 16-bit lanes where ``wide`` (the codec's ids fit), else 16 in 32-bit lanes; record
    where its sequences begin. Steps with a malformed unit are redone one unit at a time
    (``_redo_units``). Writes up to 2 * LANES ids past its output."""
    start, stop = bounds[chunk], bounds[chunk + 1]
    p, o = start, source
    sequence = np.searchsorted(offsets, start) - 1
    carried = (np.int64(_NONE), np.int64(_PLAIN), np.int64(0))
    n_bad, first_bad = 0, -1
    scratch = np.zeros(_EDGE_SCRATCH, dtype=np.uint32)
    # wide steps run from p <= last_wide (the last position is left to a 16-lane step,
    # which checks the unit it ends with)
    last_wide = min(stop - 1, ids.size) - WIDE_DECODE_POSITIONS
    touched, region_stop = o, min(out.size, source + 3 * (stop - start) + LANES)
    while p < stop:
        if wide and p <= last_wide:
            p, o, carried, sequence, touched, malformed = _decode_wide_run(
                ids, offsets, cuts, chunk, p, last_wide, o, touched, region_stop, layout, base,
                carried, out, sequence, sequence_out)
            if malformed == 0:
                continue
            p, o, carried, sequence, run_bad, run_first_bad = _redo_units(
                ids, offsets, sequence, p, p + WIDE_DECODE_POSITIONS, decode_table, base, out,
                o, carried, chunk, sequence_out)
            n_bad += run_bad
            if first_bad < 0:
                first_bad = run_first_bad
            continue
        cut = _cut_window(cuts, p)
        n_in_span = min(stop - p, LANES)
        if _needs_edge_copy(p, ids.size, DECODE_REACH):
            _edge_copy(ids, p, scratch)
            written, malformed, carry, kept = _decode_step(scratch, EDGE, n_in_span, cut, layout,
                                                           base, carried, out, o)
        else:
            written, malformed, carry, kept = _decode_step(ids, p, n_in_span, cut, layout, base,
                                                           carried, out, o)
        if malformed == 0 and not (p + LANES >= stop and _leaves_unit_open(carry)):
            sequence = _record_sequence_starts(offsets, sequence, p + n_in_span, o, kept, 2, p,
                                               chunk, sequence_out)
            p, o, carried = p + LANES, o + written, carry
            continue
        p, o, carried, sequence, run_bad, run_first_bad = _redo_units(
            ids, offsets, sequence, p, min(p + LANES, stop), decode_table, base, out, o,
            carried, chunk, sequence_out)
        n_bad += run_bad
        if first_bad < 0:
            first_bad = run_first_bad
    return o - source, n_bad, first_bad


def bitlevel_decode_cpu(ids, offsets, decode_table, base_vocab_size, n_chunks=1,
                        run=_one_by_one):
    """Decode with Numba: 16-lane vector steps over each chunk of positions, the chunks
    run as for encoding.

    Returns ``(out_ids, out_offsets, n_malformed, first_malformed)``. Scratch: an output
    buffer of 3 * len(ids) + 16 ids per chunk (decoding grows at most 3x); only the pages
    written are touched, and with one chunk the buffer is returned, trimmed.
    """
    layout = _lane_table(_decode_lane_table, decode_table)
    bounds = _plan_chunks(ids, offsets, _chunk_count(ids.size, n_chunks), True, decode_table,
                          base_vocab_size, decode_table.size)
    sources = _chunk_sources(bounds, 3)
    out = np.empty(3 * ids.size + LANES * sources.size, dtype=np.uint32)
    wide = _fits_wide_lanes(base_vocab_size + decode_table.size)
    chunk_lengths, chunk_bad, chunk_first_bad, sequence_out = _decode_chunks(
        ids, offsets, bounds, sources, decode_table, layout, base_vocab_size, wide, out, run)
    joined, out_offsets = _join_chunks(out, sources, chunk_lengths, sequence_out, offsets,
                                       bounds, run)
    return joined, out_offsets, int(chunk_bad.sum()), _first_found(chunk_first_bad)


def _decode_chunks(ids, offsets, bounds, sources, decode_table, layout, base_vocab_size, wide,
                   out, run):
    """Run ``_decode_chunk`` on every chunk (through ``run``); gather what each one reports."""
    n_chunks = bounds.size - 1
    sequence_out = np.full(offsets.size + n_chunks, -1, dtype=np.int64)  # + spare slots
    cuts = _cut_map(offsets, ids.size)
    reports = np.array(run(_decode_chunk, [
        (ids, offsets, cuts, c, bounds, sources[c], decode_table, layout, base_vocab_size,
         wide, out, sequence_out) for c in range(n_chunks)]), dtype=np.int64).reshape(n_chunks, 3)
    return reports[:, 0], reports[:, 1], reports[:, 2], sequence_out


# --- CUDA target: one thread per position; scans by xp.cumsum ----------------------------


@cuda.jit
def mark_boundaries_kernel(offsets, boundary):
    """boundary[offsets[t]] = 1. Launch: one thread per offset (B + 1), grid-stride. No scratch."""
    for t in range(cuda.grid(1), offsets.size, cuda.gridsize(1)):
        boundary[offsets[t]] = 1


@cuda.jit
def encode_char_prefix_kernel(ids, boundary, lead_prefix_ids, char_prefix):
    """char_prefix[i] = prefix id of the character starting at i, else 0.

    Launch: one thread per id, grid-stride. No scratch.
    """
    n = ids.size
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        prefix = np.uint32(0)
        if i + 2 < n and boundary[i + 1] == 0 and boundary[i + 2] == 0 and ids[i] < 256:
            lead_prefix = lead_prefix_ids[ids[i]]
            if starts_char(lead_prefix, ids[i + 1], ids[i + 2]):
                prefix = lead_prefix
        char_prefix[i] = prefix


@cuda.jit
def encode_lengths_kernel(ids, boundary, char_prefix, base_vocab_size, lengths, first_bad):
    """lengths[i] = ids written for position i (0-3); atomic-min of bad positions.

    Launch: one thread per id, grid-stride. No scratch; ``first_bad`` is int64[1],
    preset to len(ids).
    """
    for i in range(cuda.grid(1), ids.size, cuda.gridsize(1)):
        back1 = char_prefix[i - 1] if i >= 1 else 0
        back2 = char_prefix[i - 2] if i >= 2 else 0
        back3 = char_prefix[i - 3] if i >= 3 else 0
        length = encode_length(char_prefix[i], back1, back2, back3, boundary[i] == 0)
        lengths[i] = length
        if length == 1 and ids[i] >= base_vocab_size:
            cuda.atomic.min(first_bad, 0, i)


@cuda.jit
def encode_scatter_kernel(ids, char_prefix, lengths, positions, value_ids, out):
    """Write each position's ids at positions[i].

    Launch: one thread per id, grid-stride. No scratch.
    """
    for i in range(cuda.grid(1), ids.size, cuda.gridsize(1)):
        length = lengths[i]
        at = positions[i]
        if length == 1:
            out[at] = ids[i]
        elif length >= 2:
            if length == 3:
                out[at] = char_prefix[i]
                at += 1
            out[at] = value_ids[hi_value(ids[i], ids[i + 1])]
            out[at + 1] = value_ids[lo_value(ids[i + 1], ids[i + 2])]


@cuda.jit
def decode_classify_kernel(ids, boundary, decode_table, base_vocab_size, entries, events):
    """entries[i] = decode entry of ids[i]; events[i] = 1 where the prefix state is set.

    Launch: one thread per id, grid-stride. No scratch.
    """
    for i in range(cuda.grid(1), ids.size, cuda.gridsize(1)):
        x = ids[i]
        if x >= base_vocab_size and x - base_vocab_size < decode_table.size:
            entry = decode_table[x - base_vocab_size]
        else:
            entry = non_codec_entry(x, base_vocab_size)
        entries[i] = entry
        kind = entry_kind(entry)
        is_event = boundary[i] != 0 or (kind != KIND_HI and kind != KIND_LO)
        events[i] = 1 if is_event else 0


@cuda.jit
def decode_record_events_kernel(entries, events, event_rank, event_prefix):
    """event_prefix[k] = the prefix set by the k-th event (NO_PREFIX unless a prefix id).

    Launch: one thread per id, grid-stride. Scratch: ``event_prefix`` int64[len(ids)], filled here.
    """
    for i in range(cuda.grid(1), entries.size, cuda.gridsize(1)):
        if events[i] != 0:
            entry = entries[i]
            is_prefix = entry_kind(entry) == KIND_PREFIX
            event_prefix[event_rank[i] - 1] = entry_payload(entry) if is_prefix else NO_PREFIX


@cuda.jit
def decode_units_kernel(entries, boundary, event_rank, event_prefix, units, lengths, malformed):
    """units[i] = decode_unit of position i, lengths[i] = ids it writes; malformed summary.

    Launch: one thread per id, grid-stride. ``malformed`` is int64[2] = (count, first position),
    preset to (0, len(ids)). The prefix in force at i is event_prefix[event_rank[i] - 1].
    """
    n = entries.size
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        kind = entry_kind(entries[i])
        next_kind = KIND_END
        if i + 1 < n and boundary[i + 1] == 0:
            next_kind = entry_kind(entries[i + 1])
        prev_is_hi = i > 0 and boundary[i] == 0 and entry_kind(entries[i - 1]) == KIND_HI
        has_prefix = event_prefix[event_rank[i] - 1] != NO_PREFIX
        unit = decode_unit(kind, next_kind, has_prefix, prev_is_hi)
        units[i] = unit
        lengths[i] = unit_length(unit)
        if unit == UNIT_BAD:
            cuda.atomic.add(malformed, 0, 1)
            cuda.atomic.min(malformed, 1, i)


@cuda.jit
def decode_scatter_kernel(ids, entries, units, event_rank, event_prefix, positions, out):
    """Write each position's bytes (or id) at positions[i].

    Launch: one thread per id, grid-stride. No scratch.
    """
    for i in range(cuda.grid(1), ids.size, cuda.gridsize(1)):
        unit = units[i]
        at = positions[i]
        if unit == UNIT_COPY:
            out[at] = ids[i]
        elif unit == UNIT_CHAR:
            prefix = event_prefix[event_rank[i] - 1]
            hi, lo = entry_payload(entries[i]), entry_payload(entries[i + 1])
            out[at] = lead_byte(prefix, hi)
            out[at + 1] = middle_byte(hi, lo)
            out[at + 2] = last_byte(lo)
        elif unit == UNIT_BAD:
            out[at] = REPLACEMENT_BYTES[0]
            out[at + 1] = REPLACEMENT_BYTES[1]
            out[at + 2] = REPLACEMENT_BYTES[2]


# Every @cuda.jit kernel of this module with the signature it is launched with; the
# PTX test compiles each for sm_80 and sm_90 without a device.
CUDA_KERNEL_SIGNATURES = {
    "mark_boundaries_kernel": "void(int64[::1], uint8[::1])",
    "encode_char_prefix_kernel": "void(uint32[::1], uint8[::1], uint32[::1], uint32[::1])",
    "encode_lengths_kernel":
        "void(uint32[::1], uint8[::1], uint32[::1], int64, uint8[::1], int64[::1])",
    "encode_scatter_kernel":
        "void(uint32[::1], uint32[::1], uint8[::1], int64[::1], uint32[::1], uint32[::1])",
    "decode_classify_kernel":
        "void(uint32[::1], uint8[::1], uint32[::1], int64, uint32[::1], uint8[::1])",
    "decode_record_events_kernel": "void(uint32[::1], uint8[::1], int64[::1], int64[::1])",
    "decode_units_kernel": "void(uint32[::1], uint8[::1], int64[::1], int64[::1], uint8[::1],"
                           " uint8[::1], int64[::1])",
    "decode_scatter_kernel": "void(uint32[::1], uint32[::1], uint8[::1], int64[::1], int64[::1],"
                             " int64[::1], uint32[::1])",
}


def _boundary_flags_cuda(xp, offsets, n):
    boundary = device_zeros(xp, n + 1, xp.uint8)
    launch(mark_boundaries_kernel, offsets.size, offsets, boundary)
    return boundary


def bitlevel_encode_cuda(ids, offsets, lead_prefix_ids, value_ids, base_vocab_size, xp=None):
    """Encode with CUDA kernels: start flags, lengths, exclusive scan (xp.cumsum), scatter.

    All arrays live on the device (CuPy; NumPy under the simulator). Returns
    ``(out_ids, out_offsets, first_bad)``. One host read (total, first bad), after the scan.
    Device scratch for n ids: boundary flags (n + 1 bytes), char prefixes (4n),
    lengths (n), positions (8n + 8); the output buffer holds n ids (encoding never grows).
    """
    xp = array_module(ids) if xp is None else xp
    n = ids.size
    boundary = _boundary_flags_cuda(xp, offsets, n)
    char_prefix = device_empty(xp, n, xp.uint32)
    launch(encode_char_prefix_kernel, n, ids, boundary, lead_prefix_ids, char_prefix)
    lengths = device_empty(xp, n, xp.uint8)
    first_bad = device_full(xp, 1, n, xp.int64)
    launch(encode_lengths_kernel, n, ids, boundary, char_prefix, base_vocab_size, lengths,
            first_bad)
    positions = exclusive_scan(xp, lengths)
    out = device_empty(xp, n, xp.uint32)  # encoding never grows: no read of the total needed yet
    launch(encode_scatter_kernel, n, ids, char_prefix, lengths, positions, value_ids, out)
    total, bad = to_host(xp.concatenate((positions[-1:], first_bad)),
                         "bit-level encode size").tolist()  # sync
    return out[:total], positions[offsets], bad if bad < n else -1


def bitlevel_decode_cuda(ids, offsets, decode_table, base_vocab_size, xp=None):
    """Decode with CUDA kernels: classify, "last prefix seen" scan, lengths, scan, scatter.

    The "last prefix seen" scan is a cumsum of event flags (event rank), a scatter of
    each event's prefix by rank and a gather by rank. Returns
    ``(out_ids, out_offsets, n_malformed, first_malformed)``. One host read (the
    output size and the malformed summary), before the scatter. Device scratch for n
    ids: boundary flags (n + 1 bytes), entries (4n), events (n), event ranks (8n), event
    prefixes (8n), units (n), lengths (n), positions (8n + 8).
    """
    xp = array_module(ids) if xp is None else xp
    n = ids.size
    boundary = _boundary_flags_cuda(xp, offsets, n)
    entries = device_empty(xp, n, xp.uint32)
    events = device_empty(xp, n, xp.uint8)
    launch(decode_classify_kernel, n, ids, boundary, decode_table, base_vocab_size, entries,
            events)
    event_rank = xp.cumsum(events, dtype=xp.int64)
    event_prefix = device_empty(xp, n, xp.int64)
    launch(decode_record_events_kernel, n, entries, events, event_rank, event_prefix)
    units = device_empty(xp, n, xp.uint8)
    lengths = device_empty(xp, n, xp.uint8)
    malformed = to_device(xp, [0, n], np.int64)
    launch(decode_units_kernel, n, entries, boundary, event_rank, event_prefix, units, lengths,
            malformed)
    positions = exclusive_scan(xp, lengths)
    total, n_bad, first_bad = to_host(xp.concatenate((positions[-1:], malformed)),
                                      "bit-level decode size").tolist()  # sync
    out = device_empty(xp, total, xp.uint32)
    launch(decode_scatter_kernel, n, ids, entries, units, event_rank, event_prefix, positions,
            out)
    return out, positions[offsets], n_bad, first_bad if n_bad else -1


# Performance notes
# -----------------
# bench/bitlevel_bench.py, one thread, 20M ids, on a shared 2-core Xeon VM (AVX-512;
# Numba reports "rocketlake"); ratio = np.copy time / codec time, same input array.
# The machine's speed drifts by up to 2x over minutes: compare only ratios from one
# run, or variants interleaved in one process (best of 21). Numbers: bench/RESULTS.md.
#
# The CPU kernels (2026-11-22, third version): 16-lane vector steps.
# - Each of 16 positions works out what it writes from the ids around it, and
#   llvm.experimental.vector.compress packs the kept lanes for one 64-byte store
#   (vpcompressd with AVX-512, a branch-free lane-by-lane sequence elsewhere). Only
#   target-independent IR: built for haswell (AVX2) and baseline x86-64 with
#   NUMBA_CPU_NAME, the steps were as fast as or faster than the scalar loops below
#   built the same way (RESULTS.md).
# - Against the bit-mask loops they replaced (interleaved, best of 21): encode
#   0.42-0.49 -> 0.63-0.66 of copy, decode 0.35-0.42 -> 0.49-0.57.
# - Table lookups are arithmetic on lanes: value ids are consecutive over runs of
#   32 (or 64) values, so a lookup is a small select chain or a shift of a packed
#   word (``_encode_lane_table``, ``_decode_lane_table`` check that the policy's tables
#   have that shape). A masked gather from value_ids instead made "bytes" encoding
#   slower than the old loop (64 vs 35 ms per 20M ids).
# - Decoding: a hi id writes the lead byte, the lo id after it the middle and last
#   bytes (it gets the hi value from the lane before, or from the step before), so no
#   step reads ahead of its 16 ids and each check compares a position with the one
#   before it. A step always advances 16: letting a step stop before a unit that
#   crosses its end put the next load behind the classification of this one (a
#   loop-carried chain: 41 -> 44 ms, mixed). The "last prefix seen" scan is 4 rounds
#   of doubling with _UNSEEN as fill, and the prefix from the step before is put in
#   after it, so the scan does not wait on the previous step.
# - Checks (a lo id right after each hi id, a hi id after each prefix id, ...) are a
#   few and/xor/shift operations on one-bit class codes, whole vectors at a time.
#   Written first as logic on vectors of flags they compiled to mask-register
#   instructions, which run on one port: dropping the checks then saved 12 of 42 ms
#   (compute only, output pre-faulted); as 16-bit masks in general-purpose
#   registers, half of that; as class-code logic, 2-3 ms (decode "bytes" compute
#   35 -> 26 ms). A step with any malformed unit is redone one unit at a time
#   (``_decode_units``), from the unit the step before left open.
# - What is left: the two compress + 64-byte store pairs per decoding step (one per
#   encoding step) are about a third of the compute time; the stores are unaligned,
#   so nearly every one splits a cache line. The memory form
#   (llvm.masked.compressstore) was no faster, nor a masked store of only the kept
#   lanes (fewer split lines; 36 -> 34 ms once, equal on the rerun). LLVM keeps ~25 vector constants on the
#   stack and reloads them each step. Page faults on the fresh output cost about as
#   much again: np.copy spends about half its time in them, and so does a codec call.
#
# From the earlier scalar loops (bit masks of character starts, a per-id loop for
# dense runs), still true of Numba code in general:
# - Output allocated by NumPy in the Python wrapper, not by np.empty inside @njit:
#   NumPy asks for transparent huge pages, Numba's allocator does not (alloc + fill
#   of 20M ids: 44 ms -> 23-30 ms).
# - uint64 indices in scalar hot loops: Numba adds a negative-index fix-up to every
#   signed index (1.5x on the old encoder); uint32 meets int64 as float64, so cast.
# - No array arguments to inline="always" helpers that branch or return early: Numba
#   leaves an atomic NRT incref/decref pair around every call.
# - The floor of a sequential decoder whose next position waits on the id just read
#   was 0.41-0.42 of copy on this machine, which is why the vector steps were written.
#
# Issue 18 (2026-11-23, shared 2-core AMD EPYC VM, load 4-9 from other sessions; CPU
# time, medians; bench/RESULTS.md): real text, the zh + ja lines of
# tests/data/multiscript.txt as byte ids, one ~60-id document a line.
# - The lane steps against the best plain Numba loops written for this (kept in
#   bench/bitlevel_plain.py for the comparison): encode 1.5x and decode 1.9x faster on
#   real CJK, 1.9-3.3x on the synthetic corpora, so the LLVM IR stays (the issue's bar:
#   >= 1.3x).
#   Plain loops tried: one unit (character or id) per step, branchy or branch-free
#   (each step waits on two loads of the step before: ids[i], then the lead-byte
#   table; ~11 cycles a unit); one position per step (only the output position
#   carried, but LLVM turns the selects back into branches).
# - Against np.copy, one core, 20M ids: real encode 0.20, decode 0.14; synthetic
#   0.22-0.29; far from 0.5 (np.copy ran at ~2,400 Mids/s here).
# - Short documents cost: the same ids as one document encoded in 0.70x and decoded in
#   0.78x the time of ~60-id lines, ~90 ns per document. Not NRT reference counts
#   (compiling the span loops without NRT changed nothing): the call of the span
#   loop, with the layout tuple and eight more arguments, once per document.
#   ``_encode_span`` / ``_decode_span`` inlined (inline="always") into the chunk
#   loops: real zh+ja encode 0.16-0.20 -> 0.19-0.22 of copy, decode 0.14 ->
#   0.17-0.19 (A/B/A/B runs of bitlevel_bench --corpus real). What is left per
#   document is the partial last step; steps that run across document ends, with
#   per-lane bounds, are the next thing to try.
#
# Steps across sequence ends (2026-11-23 13:15-13:30 UTC, same VM, load 5-12; process
# CPU time, 20M ids, one thread; bench/RESULTS.md):
# - A chunk is one run of steps; the sequence starts reach a step as bits of
#   ``_cut_map`` (a uint64 bit map built once per call, n / 8 bytes), turned into lane
#   masks by a move to a mask register (``flags_of_bits``; as a vector shift and
#   test they cost 3 vector instructions each). Encoding: a character may not cross a
#   start, and a prefix is not repeated across one. Decoding: a start is an event of
#   the "last prefix seen" scan with no prefix, and a hi or prefix id right before it
#   is malformed. Each step returns the bits of the lanes it kept; a sequence starting
#   inside it takes its output offset from a popcount of them.
# - Encoding also works out character starts at p + lane and p + lane - 3 only, and
#   shuffles the starts one and two positions back out of the two (``shifted_up`` with
#   ``fill_from``): two of the four start computations gone.
# - Real zh+ja, old -> new, interleaved in one process: encode 0.21-0.24 -> 0.29-0.30
#   of np.copy (mixed 0.23-0.28 -> 0.29-0.33), decode 0.19-0.22 -> 0.19-0.20 (mixed
#   0.25-0.27 -> 0.23-0.26): decoding lost its per-document restart and gained about
#   as much work per step (the start checks, the kept bits).
# - Where the time goes now (20M real ids, output buffer pre-faulted vs not): encode
#   20-22 ms of compute + ~8 ms of page faults, decode 25-27 + ~9; np.copy 7.5-8.7 ms
#   in all. A 16-lane step is ~100 AVX-512 instructions, and this Zen 4 core runs a
#   512-bit instruction as two 256-bit halves: ~1 ns per id of compute, where 0.5x of
#   np.copy would allow ~0.4 after the faults. Reaching it needs a step with far fewer
#   instructions per id (e.g. 16-bit lanes where the ids allow), not less overhead.
#
# Wide steps (2026-11-23 15:25-16:05 UTC, same VM, load 0.5-5; process CPU time, 20M
# ids, one thread; bench/RESULTS.md "Issue 18, codec helper, part 2"):
# - Real zh+ja is byte fallbacks throughout: 93% of its ids are bytes >= 0x80 and only
#   0.8% of 16-id windows (0.2% of 32-id ones) are all ASCII, so a "plain window, copy
#   it" fast path has nothing to skip there. Each step's work was cut instead.
# - 32 positions in 16-bit lanes (``LaneBuilder(builder, 32, 16)``): loads saturate each
#   id to 0xFFFF (vpmovusdw; truncating would read 0x100E4 as the lead byte 0xE4),
#   stores widen the kept lanes (vpcompressw, vpmovzxwd). Encoding reads six shifted
#   views of the ids (-3..+2): two saturating loads and four vpermi2w shuffles of them,
#   not six loads (each two loads, two vpmovusdw and an insert): one document 15.4 ->
#   13.8 ms. An id of 0xFFFF or more makes encoding redo the 32 positions as two 32-bit
#   steps; when decoding it is past the codec's ids, so malformed, and redone one unit
#   at a time, as before.
# - Table lookups as one vpermw / vpermd (target-specific IR, only with AVX-512:
#   ``_lanes.can_permute``): lead byte -> prefix id, hi and lo value ids, a value id's
#   run, a prefix id's prefix; the tables are vectors of the lane number, hoisted out
#   of the loop. Replaced select chains of 3-4 compares and blends each.
# - Sequence records: a step holds at most one sequence start nearly always; that case
#   is now branch-free (written to the chunk's spare slot when there is none). The
#   loop mispredicted about once a document: 20.2 -> 16.3 ms (output pre-faulted).
# - Joining: the sequences' output offsets in one compiled pass (NumPy gathers over
#   320 K documents: 1.6 -> 0.45 ms).
# - Before -> after, interleaved in one process (HEAD's kernels imported beside these,
#   medians of 11, ratio to np.copy): real encode 0.31 -> 0.43, decode 0.18 -> 0.29;
#   mixed 0.29 -> 0.39 / 0.21 -> 0.33; bytes 0.32 -> 0.45 / 0.22 -> 0.32.
# - Where the time goes now (real zh+ja, 20M ids): encode 12.7 ms of compute (output
#   pre-faulted; 0.58-0.69 ns/id, the same with the input in L2, so not memory bound) +
#   ~7 ms of first touch of its 65 MB of output + ~1 ms of planning and joining, against
#   np.copy's 7.4-9 ms; decode 14.6 ms of compute + ~8.5 ms of first touch (80 MB out).
#   First touch of fresh memory costs ~0.1 ms per MB on this VM (madvise
#   MADV_POPULATE_WRITE of 80 MB alone: 8.8 ms; the same write to touched pages: 3 ms);
#   np.copy pays it too, but decoding writes 1.23 ids per id read, so its floor from
#   page faults alone is above half of np.copy's time: 0.5x needs the output buffer
#   reused (an ``out=`` argument), not a faster step.
# - What limits a step (experiments, not kept): a wide encoding step with the
#   computation replaced by "write the id" (loads, narrowing, compress, stores, records)
#   ran 0.33 ns/id; with the six views built and summed, 0.59-0.68, as much as the whole
#   step (0.58): the shuffles that build the views and narrow the ids (vpmovusdw,
#   vpermi2w/vpermt2w on 16-bit lanes) look like the bottleneck, not the logic.
#   Tried, no change beyond the noise: the character starts of p-3..p-1 carried from
#   the step before (two views and one start computation fewer, three scalars
#   extracted and inserted); vpackusdw + vpermq instead of vpmovusdw + insert. A
#   further 2x would need far fewer cross-lane shuffles per id, e.g. 8-bit lanes (64
#   positions of vpmovusdb-narrowed ids) for the byte classification.
# - Timing noise on this VM: the same step ran 0.59 and 1.1 ns/id minutes apart in one
#   process (the other vCPU, likely a sibling on the same host core, busy or not), so
#   single timings are good to about +-30%; compare variants interleaved.

#
# Part 3, codec3 (2026-11-23 18:10-19:05 UTC, same VM: AMD EPYC Zen 4, 2 vCPUs, load 1-5;
# process CPU time, 20M real zh+ja ids, one thread; bench/RESULTS.md "Issue 18, codec
# helper, part 3 (codec3)"; A/B runs: bench/bitlevel_ab.py, a revision's kernels beside
# the working tree's, interleaved, medians of 11):
# - Wide encoding step rewritten around bit maps (kept): the ids are narrowed once (one
#   saturating load per 16 ids) and classified in 16-bit lanes: lead byte of the set (the
#   prefix-id lookup, vpermw, and a range test), continuation byte, the lead byte's bits 2
#   and 3 (its quad), id >= base. The five flag vectors go to general-purpose registers
#   (kmov) and everything positional is done there on 64-bit words: starts = lead &
#   continues >> 1 & continues >> 2 & ~(sequence start at +1 or +2); starts one, two and
#   three back are shifts of that word, with the three bits before the step carried from
#   the step before (``_encode_carry`` works them out where 32-bit steps ran before);
#   a repeated prefix is starts & starts-3-back & same quad & no sequence start here;
#   kept and bad bits likewise. The bits come back as masks for three blends and the
#   compress. The only cross-lane shuffle left is the ids one position back (for the hi
#   and lo lookups); the old step built five shifted views (vpermi2w) and worked the
#   starts out twice. Compute (output pre-faulted): 12.1 -> 9.9 ms.
# - Sequence records of a wide step from the cut bits (kept): up to two starts
#   branch-free (slots chosen by arithmetic, not a conditional, which LLVM made a
#   branch), the general loop where the offsets show more sequences than start bits
#   (three or more starts, or empty sequences sharing a bit). With 32-position steps
#   the records cost ~1.6 ms of 9.9 (measured by leaving them out); branch-free,
#   compute 11.9 -> 11.2 ms (A/B, same run).
# - 64 positions a wide step (kept): two vectors of 16-bit lanes share the bit-map
#   work, the cut window, the carry, the loop's bookkeeping and one record call:
#   compute 10.5 -> 8.3 ms; whole calls 0.40 -> 0.52 of np.copy against the session's
#   start (cf5559c). After it, leaving the records out made no measurable difference.
# - Flags of the two vectors joined into one 64-bit mask (kunpckdq + kmovq) and split
#   back with kshiftrq, instead of two kmovd, a shift and an or each way (kept): 3%.
# - One chunk: the records are the output offsets (no second pass and array); records
#   without a chunk index per sequence (found from the bounds when several chunks ran):
#   2.6 MB less to fault in and write per 320 K documents; encode and decode ~4% (kept).
# - ``_lanes.cpu_features`` asked of LLVM once: it cost 0.25 ms a call (kept).
# - Tried, not kept: hi and lo value ids from one 64-entry vpermi2w (lanes 32-63 hold the
#   hi runs: a lead byte & 63 is 32-47) instead of two vpermw, with one shift-and-mask:
#   0.97x (no gain); widening the 16-bit lanes first and compressing as two 16 x 32-bit
#   vpcompressd: 0.91x (vpcompressw + two vpmovzxwd is cheaper here).
# - The wide encoding steps as a loop of their own inside the chunk loop (kept): compute
#   1.13x (1.08-1.21) and 1.03x (1.02-1.06) in two A/B runs, whole calls 1.04x; LLVM
#   kept fewer of the step's values and constants on the stack.
# - The wide decoding steps likewise (kept): compute 1.13x (1.10-1.15), whole calls
#   1.09x (1.05-1.10) on real zh+ja.
# - Tried for decoding, not kept: the wide decoding step's records from the cut bits,
#   branch-free for up to two starts, as encoding's: compute 0.99x (no gain; its records
#   were not where its time goes).
# - Tried, not kept: the cut window read with unsigned indices (no negative-index
#   fix-ups): 1.00x encode and decode.
# - Result (bench/bitlevel_bench.py, 19:00 UTC): real zh+ja encode 0.57 / 0.57 of
#   np.copy (was 0.38-0.44), decode 0.33 / 0.34 (was 0.25-0.35); lanes over plain loops
#   4.1x / 4.4x, so the LLVM IR stays.
# - Where the time goes now (encode, 20M real ids, 18:45-19:03 UTC): whole call 15 ms =
#   step loop 7.1-8.1 (0.35-0.40 ns/id, the same with the input in L2: compute bound) +
#   cut map 0.4-0.5 + page faults of the fresh 65 MB output 6.6-7 (writing 65 MB of fresh
#   memory alone: 7.7-8.5) + planning and joining <= 0.7; np.copy of the input 8.3-9.1 ms.
#   The faults are ~45% of the call and np.copy pays them for 80 MB; what is left to cut
#   is the step (~60 zmm instructions and ~100 scalar ones per 64 ids).
# - Decoding: only the loop change above and the records' arrays (1.09-1.12x whole
#   calls). Its output is 1.23 ids per input id: the faults of its 80 MB output (~8.5 ms)
#   alone take longer than np.copy of its 65 MB input (6.3-7 ms), so 0.5x would need its
#   compute cut from ~12 to ~3-4 ms, or the output buffer reused (``out=``). The same
#   bit-map rewrite would help it (its checks are shifts of class bits, and the "last
#   prefix seen" scan, five rounds of vector shuffles now, is a carry propagation on bit
#   maps), but not by 3-4x.
#
# Session 9 (2026-11-26 17:05-17:45 UTC, same VM: AMD EPYC Zen 4, 2 vCPUs, load 0.3-1.8;
# process CPU time, 16.3M coded real zh+ja ids, one thread; bench/RESULTS.md "Issue 18,
# lead, session 9"; A/B: bench/bitlevel_ab.py --rev HEAD, medians of 11):
# - At the start, in a quiet phase: decode whole call 13.1-13.5 ms = chunk loop on a
#   fresh output 12.5 + planning and joining ~0.6; the loop on a pre-faulted output 7.6
#   (0.47 ns/id, the same with the input in L2: compute bound); np.copy 6.4 ms. Ratio
#   0.43-0.49 (the 0.33 of earlier sessions was a slower phase of this VM).
# - The wide decoding step rewritten around bit maps, as the encoding step was, over 64
#   positions (kept): the four classes and the prefix's two bits go to general-purpose
#   registers as 64-bit maps (one kunpckdq and one kmovq each); the checks are shifts and
#   logic there; the "last prefix seen" scan, five rounds of vector shuffles before, is
#   one addition per bit plane (``_filled``): in force / bit 0 / bit 1. The slots' keep
#   masks are two pdep of the maps (first id: hi, lo or plain; second: lo). Compute
#   7.6 -> 6.5 ms (0.36 ns/id in L2, was 0.46); whole calls 1.07x / 1.14x / 1.11x (real,
#   mixed, bytes).
# - The output's page faults: the loop on a fresh output cost 6-6.5 ms more than on a
#   touched one, where writing the same 80 MB fresh costs 2.5-2.7 ms more (alloc, fill,
#   free). Faulted in all at once before the loop (outside the call), then decoded:
#   9.8 ms against 11.6. So the faults cost twice as much taken one by one among the
#   steps. ``_fault_in`` touches the output (one store every 4 KB) in bursts ahead of the
#   steps (kept, 8 MB): whole calls 1.10-1.12x; bursts of 2 MB 1.01-1.03x, 4 MB 1.06x,
#   16 MB 1.08-1.10x, 32 MB 1.06x. The same for encoding: 1.01-1.02x (not kept).
# - The wide decoding steps as a function of their own (``_decode_wide_run``; kept):
#   compute 1.09-1.10x, whole calls 1.06-1.07x. The same for encoding: 0.96-0.99x (not
#   kept).
