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
decodes to) is written once as ``@njit`` functions and called by the CPU loops
and the CUDA kernels alike; the NumPy target calls the same functions'
``py_func`` on whole arrays where the function is branch-free.

What was tried for speed, and what it gave: "Performance notes" at the end of the module.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import cuda, njit, prange, types
from numba.core.extending import intrinsic

from ._cuda import array_module, exclusive_scan, launch, launch_counts
from ._jit import hot

# Kinds of id seen by the decoder. KIND_END stands for "no next id in this sequence".
KIND_PASS, KIND_HI, KIND_LO, KIND_PREFIX, KIND_INVALID, KIND_END = 0, 1, 2, 3, 4, 5
# What one position of coded input decodes to.
UNIT_EMPTY, UNIT_COPY, UNIT_CHAR, UNIT_BAD = 0, 1, 2, 3
NO_PREFIX = -1
REPLACEMENT_BYTES = (0xEF, 0xBF, 0xBD)  # U+FFFD in UTF-8

MIN_CHUNK_IDS = 1 << 16  # below this a CPU thread costs more than it saves
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


def bitlevel_encode_numpy(ids, offsets, lead_prefix_ids, value_ids, base_vocab_size):
    """Encode with NumPy array steps: start flags, lengths, exclusive scan, scatter.

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


def bitlevel_decode_numpy(ids, offsets, decode_table, base_vocab_size):
    """Decode with NumPy array steps: classify, "last prefix seen" scan, lengths, scan, scatter.

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


# --- CPU target: Numba loops, one chunk of positions per thread ---------------------------
#
# Chunks split the flat ids at "safe" positions q: a sequence start, or a position
# whose previous id is a plain id (encoding: neither a lead nor a continuation
# byte; decoding: not a codec id). No character crosses a safe split and no
# prefix is in force there, so each chunk runs the sequential loop on its own.
# Chunk c writes its output from growth * bounds[c] (growth 1 when encoding, whose
# output is never longer than its input, 3 when decoding); the pieces are then
# gathered. One chunk (one thread) returns its piece as it is, without a copy.


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
    """int64[k + 1]: bounds of up to ``n_wanted`` chunks of at least MIN_CHUNK_IDS ids."""
    n = ids.size
    n_chunks = max(1, min(n_wanted, n // MIN_CHUNK_IDS))
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


def _join_chunks(out, bounds, growth, chunk_lengths, sequence_out, sequence_chunk):
    """Join the chunks' outputs; turn the recorded sequence starts into output offsets.

    Chunk c wrote ``chunk_lengths[c]`` ids from ``out[growth * bounds[c]]``; a sequence
    that no chunk reached starts at the end of the output.
    """
    dest = np.zeros(chunk_lengths.size + 1, dtype=np.int64)
    np.cumsum(chunk_lengths, out=dest[1:])
    total = int(dest[-1])
    sources = growth * bounds[:-1]
    if chunk_lengths.size == 1:
        joined = out[:total]
    else:
        joined = np.empty(total, dtype=np.uint32)
        _copy_chunks(out, sources, chunk_lengths, joined, dest)
    shift = dest[sequence_chunk] - sources[sequence_chunk]
    return joined, np.where(sequence_out < 0, total, sequence_out + shift)


@njit(parallel=True, cache=True)
def _copy_chunks(out, sources, chunk_lengths, joined, dest):
    for c in prange(chunk_lengths.size):
        length = chunk_lengths[c]
        joined[dest[c] : dest[c] + length] = out[sources[c] : sources[c] + length]


# The hot loops index with uint64: Numba adds a negative-index check to every signed
# index, and the loops ran about 1.5x slower with it. uint64 and int64 mix to float64
# in Numba, so every constant in them is typed.
_U0, _U1, _U2, _U3 = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(3)
_N_VALUES = np.uint64(256)
_NO_LEAD = np.uint32(0)


# The CPU loops take the data 64 positions at a time. A loop that LLVM vectorises marks
# in a bit mask where the units that need work start (encoding: characters; decoding:
# codec ids); the scalar loop then visits only those, one count-trailing-zeros away
# from the next, and copies the plain ids between them in 16-id vector moves, so
# "plain id or not" is never a branch. Where nearly every id needs work the branch is
# predictable and the per-id loops (_encode_dense, _decode_dense) are faster: each
# span switches between the two by the density of the positions just seen.
BLOCK = 64  # positions per bit mask
DENSE_CHARS = 16  # characters per 64 positions from which the per-id loop is faster
DENSE_PLAIN = 16  # decoding: base ids per 64 positions below which the per-id loop is faster
DENSE_RUN = 4096  # positions the per-id loop takes before the density is looked at again
COPY_STEP = 16  # ids per step of _copy_run, which may write up to this many past its end
_GATHER_BYTE_BITS = np.uint64(0x0102040810204080)
_ALL_BITS = np.uint64(0xFFFFFFFFFFFFFFFF)
_63, _64 = np.uint64(63), np.uint64(64)


@intrinsic
def _trailing_zeros(typingctx, word):
    """The number of trailing zero bits of a nonzero uint64 (LLVM cttz: one instruction)."""
    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))
    return types.uint64(types.uint64), codegen


@intrinsic
def _count_ones(typingctx, word):
    """The number of set bits of a uint64 (LLVM ctpop: one popcnt instruction)."""
    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])
    return types.uint64(types.uint64), codegen


@njit(inline="always", cache=True)
def _packed_flags(n, flags, flag_words):
    """The 0/1 ``flags[:n]`` (n <= 64) as the bits of a uint64; the rest of ``flags`` is
    cleared. ``flag_words`` is the same memory as uint64[8]: eight flags at a time are
    gathered by a multiply that moves the low bits of 8 bytes into the top byte."""
    for k in range(max(n, 0), BLOCK):
        flags[k] = 0
    bits = _U0
    for w in range(8):
        bits |= ((flag_words[w] * _GATHER_BYTE_BITS) >> np.uint64(56)) << np.uint64(8 * w)
    return bits


@njit(cache=True)
def _char_start_bits(ids, block, n, lead_mask, flags, flag_words):
    """Bit k set where a character starts at ids[block + k], for k < n <= 64 (the two ids
    after each such position must be in the sequence). ``lead_mask`` bit b is set when
    0xC0 + b is a lead byte of the set.

    Scratch: ``flags`` uint8[64] and ``flag_words``, the same memory as uint64[8]
    (``_packed_flags``).
    """
    for k in range(n):
        p = np.uint64(block + k)
        x, next1, next2 = np.int64(ids[p]), np.int64(ids[p + _U1]), np.int64(ids[p + _U2])
        is_lead = ((x >> 6) == 3) & (((lead_mask >> (x & 63)) & 1) != 0)
        flags[k] = is_lead & (((next1 ^ 0x80) | (next2 ^ 0x80)) < 0x40)
    return _packed_flags(n, flags, flag_words)


@njit(inline="always", cache=True)
def _any_at_least(ids, block, n, threshold):
    """Whether any of ids[block : block + n] is >= threshold (a vectorised reduction)."""
    found = False
    for k in range(n):
        found |= ids[np.uint64(block + k)] >= threshold
    return found


@njit(inline="always", cache=True)
def _copy8(ids, p, out, o):
    """out[o : o + 8] = ids[p : p + 8], every load before any store: one vector move."""
    a0, a1, a2, a3 = ids[p], ids[p + _U1], ids[p + _U2], ids[p + _U3]
    a4, a5, a6, a7 = (ids[p + np.uint64(4)], ids[p + np.uint64(5)], ids[p + np.uint64(6)],
                      ids[p + np.uint64(7)])
    out[o], out[o + _U1], out[o + _U2], out[o + _U3] = a0, a1, a2, a3
    out[o + np.uint64(4)], out[o + np.uint64(5)] = a4, a5
    out[o + np.uint64(6)], out[o + np.uint64(7)] = a6, a7


@njit(inline="always", cache=True)
def _copy_run(ids, p, q, out, o, has_room):
    """Copy the plain ids ids[p:q] to out[o:]; return the next output position.

    With ``has_room`` (COPY_STEP ids after q in ids, and after o + q - p in this
    thread's part of out), copies COPY_STEP ids at a time, past q: the ids after the
    run are written over next.
    """
    length = q - p
    if not has_room:
        for k in range(length):
            out[o + np.uint64(k)] = ids[p + np.uint64(k)]
        return o + length
    done = _U0
    while True:
        _copy8(ids, p + done, out, o + done)
        _copy8(ids, p + done + np.uint64(8), out, o + done + np.uint64(8))
        done += np.uint64(COPY_STEP)
        if done >= length:
            return o + length


@njit(inline="always", cache=True)
def _encode_char(ids, q, lead_prefix_ids, value_ids, out, o, prefix_in_force):
    """Write the character starting at ids[q] from out[o]; return (next o, its prefix).

    The prefix is written always and kept only when it differs from the one in force.
    """
    b1, b2, b3 = ids[q], ids[q + _U1], ids[q + _U2]
    prefix = lead_prefix_ids[b1]
    out[o] = prefix
    o += np.uint64(prefix != prefix_in_force)
    out[o] = value_ids[np.uint64(hi_value(b1, b2))]
    out[o + _U1] = value_ids[np.uint64(lo_value(b2, b3))]
    return o + _U2, prefix


@njit(cache=True)
def _encode_dense(ids, start, stop, span_stop, lead_prefix_ids, value_ids, base, out, o,
                  prefix_in_force):
    """Encode the units starting in [start, stop) one by one, branching on each id (the
    loop this module had before the bit masks); characters may run to ``span_stop``.
    For character-dense output, where the branch "character or not" is predicted well.

    Returns (next input position, next output position, prefix in force, first bad
    position or -1). No counters in the loop: one more live register made it ~10% slower.
    """
    i, o = np.uint64(start), np.uint64(o)
    stop, span_stop, base = np.uint64(stop), np.uint64(span_stop), np.uint32(base)
    first_bad = -1
    while i < stop:
        b1 = ids[i]
        lead_prefix = lead_prefix_ids[b1] if b1 < 256 else _NO_LEAD
        if lead_prefix != 0 and i + _U2 < span_stop and starts_char(
            lead_prefix, ids[i + _U1], ids[i + _U2]
        ):
            b2, b3 = ids[i + _U1], ids[i + _U2]
            out[o] = lead_prefix
            o += np.uint64(lead_prefix != prefix_in_force)
            prefix_in_force = lead_prefix
            out[o] = value_ids[np.uint64(hi_value(b1, b2))]
            out[o + _U1] = value_ids[np.uint64(lo_value(b2, b3))]
            o += _U2
            i += _U3
        else:
            if b1 >= base and first_bad < 0:
                first_bad = np.int64(i)
            out[o] = b1
            o += _U1
            prefix_in_force = _NO_LEAD
            i += _U1
    return i, o, prefix_in_force, first_bad


@njit(cache=True)
def _encode_span(ids, start, stop, lead_mask, lead_prefix_ids, value_ids, base, out, out_start,
                 write_stop, dense, flags, flag_words):
    """Encode ids[start:stop], all of one sequence, no character across ``stop``; write
    from out[out_start]. Nothing is written at or after ``write_stop`` (<= len(ids)).

    Returns (next output position, first bad position or -1, dense). Goes a block at a
    time: DENSE_RUN positions by ``_encode_dense`` while the positions before were
    dense in characters (``dense``: DENSE_CHARS or more per 64), else BLOCK positions by
    the start bit mask. A bad id (>= base) is never part of a character, so the first
    one is the first id >= base. Scratch: ``flags`` and ``flag_words`` of
    ``_char_start_bits``.
    """
    p, o = np.uint64(start), np.uint64(out_start)
    prefix_in_force = _NO_LEAD
    first_bad = -1
    dense_blocks = 0
    block = start
    while block < stop:
        if dense:
            block_stop = min(block + DENSE_RUN, stop)
            p, o, prefix_in_force, bad = _encode_dense(
                ids, p, block_stop, stop, lead_prefix_ids, value_ids, base, out, o,
                prefix_in_force)
            if first_bad < 0:
                first_bad = bad
            sample = max(block_stop - BLOCK, block)  # the density of the run's last block
            sample_starts = _char_start_bits(ids, sample, min(block_stop, stop - 2) - sample,
                                             lead_mask, flags, flag_words)
            dense = np.int64(_count_ones(sample_starts)) * BLOCK >= DENSE_CHARS * (
                block_stop - sample)
            block = np.int64(p)
            continue
        n = min(BLOCK, stop - block)
        if first_bad < 0 and _any_at_least(ids, block, n, base):
            first_bad = block + np.argmax(ids[block : block + n] >= base)
        starts = _char_start_bits(ids, block, min(n, stop - 2 - block), lead_mask, flags,
                                  flag_words)
        # Two dense blocks in a row before a long per-id run: on mixed output one block
        # in ~70 is dense by chance.
        dense_blocks = dense_blocks + 1 if _count_ones(starts) >= DENSE_CHARS else 0
        dense = dense_blocks >= 2
        has_room = block + BLOCK + COPY_STEP <= write_stop  # output is never ahead of input
        while starts:
            q = np.uint64(block) + _trailing_zeros(starts)
            starts &= starts - _U1
            prefix_in_force = prefix_in_force if q == p else _NO_LEAD
            o = _copy_run(ids, p, q, out, o, has_room)
            o, prefix_in_force = _encode_char(ids, q, lead_prefix_ids, value_ids, out, o,
                                              prefix_in_force)
            p = q + _U3
        # The plain ids after the last character are copied with the next run, or here
        # before a dense block.
        if dense:
            block = np.int64(p)
        else:
            block = max(block + BLOCK, np.int64(p))
    o = _copy_run(ids, p, np.uint64(stop), out, o, stop + COPY_STEP <= write_stop)
    return np.int64(o), first_bad, dense


@njit(cache=True)
def _flag_scratch():
    """``flags`` uint8[64] and ``flag_words`` uint64[8] over the same memory."""
    flag_words = np.empty(BLOCK // 8, dtype=np.uint64)
    return flag_words.view(np.uint8), flag_words


@hot
def _enter_sequences(offsets, sequence, i, o, chunk, sequence_out, sequence_chunk):
    """Step past every sequence that ends at or before position i; each one entered
    starts at output position o in chunk ``chunk``. Returns the sequence holding i."""
    while offsets[sequence + 1] <= i:
        sequence += 1
        sequence_out[sequence] = o
        sequence_chunk[sequence] = chunk
    return sequence


@njit(cache=True)
def _encode_chunk(ids, offsets, chunk, bounds, lead_mask, lead_prefix_ids, value_ids, base,
                  out, sequence_out, sequence_chunk):
    """Encode chunk ``chunk``; record where each sequence starting in it begins in ``out``."""
    start, stop = bounds[chunk], bounds[chunk + 1]
    i = o = start
    sequence = np.searchsorted(offsets, start) - 1
    first_bad = -1
    dense = False
    flags, flag_words = _flag_scratch()
    while i < stop:
        sequence = _enter_sequences(offsets, sequence, i, o, chunk, sequence_out,
                                    sequence_chunk)
        sequence_stop = offsets[sequence + 1]
        span_stop = min(stop, sequence_stop)
        o, bad, dense = _encode_span(ids, i, span_stop, lead_mask, lead_prefix_ids, value_ids,
                                     base, out, o, stop, dense, flags, flag_words)
        i = span_stop
        if first_bad < 0:
            first_bad = bad
    return o - start, first_bad


def _lead_mask(lead_prefix_ids):
    """int64 bit mask of the lead bytes of the set: bit b for byte 0xC0 + b."""
    leads = np.flatnonzero(lead_prefix_ids)
    if leads.size and leads[0] < 0xC0:
        raise ValueError(f"lead_prefix_ids gives {leads[0]:#x} a prefix: not a UTF-8 lead byte")
    bits = np.bitwise_or.reduce(np.uint64(1) << (leads - 0xC0).astype(np.uint64),
                                initial=np.uint64(0))
    return int(np.array(bits, dtype=np.uint64).view(np.int64))


def bitlevel_encode_cpu(ids, offsets, lead_prefix_ids, value_ids, base_vocab_size,
                        n_chunks=None):
    """Encode with Numba: one sequential loop per chunk of positions, chunks in parallel.

    Returns ``(out_ids, out_offsets, first_bad)`` like ``bitlevel_encode_numpy``.
    ``n_chunks`` defaults to ``numba.get_num_threads()`` (one chunk per thread; fewer
    for short inputs). Scratch: an output buffer of len(ids) ids (returned, trimmed,
    when one chunk ran).
    """
    bounds = _plan_chunks(ids, offsets, n_chunks or numba.get_num_threads(), False,
                          lead_prefix_ids, base_vocab_size, 0)
    out = np.empty(ids.size, dtype=np.uint32)  # NumPy's allocator: huge pages, see the notes
    chunk_lengths, chunk_first_bad, sequence_out, sequence_chunk = _encode_chunks(
        ids, offsets, bounds, _lead_mask(lead_prefix_ids), lead_prefix_ids, value_ids,
        base_vocab_size, out)
    joined, out_offsets = _join_chunks(out, bounds, 1, chunk_lengths, sequence_out,
                                       sequence_chunk)
    return joined, out_offsets, _first_found(chunk_first_bad)


@njit(parallel=True, cache=True)
def _encode_chunks(ids, offsets, bounds, lead_mask, lead_prefix_ids, value_ids,
                   base_vocab_size, out):
    """Run ``_encode_chunk`` on every chunk, in parallel; gather what each one reports."""
    n_chunks = bounds.size - 1
    chunk_lengths = np.empty(n_chunks, dtype=np.int64)
    chunk_first_bad = np.empty(n_chunks, dtype=np.int64)
    sequence_out = np.full(offsets.size, -1, dtype=np.int64)
    sequence_chunk = np.zeros(offsets.size, dtype=np.int64)
    for c in prange(n_chunks):
        result = _encode_chunk(ids, offsets, c, bounds, lead_mask, lead_prefix_ids, value_ids,
                               base_vocab_size, out, sequence_out, sequence_chunk)
        chunk_lengths[c] = result[0]
        chunk_first_bad[c] = result[1]
    return chunk_lengths, chunk_first_bad, sequence_out, sequence_chunk


def _first_found(positions):
    """The first position that is not -1 (chunks are in order), or -1."""
    found = positions[positions >= 0]
    return int(found[0]) if found.size else -1


@njit(cache=True)
def _decode_entry(x, decode_table, base):
    """The decode entry of id x (uint64 base): from the table, or PASS / INVALID."""
    index = np.uint64(x) - base  # wraps to a huge value for x < base
    if index < np.uint64(decode_table.size):
        return np.uint32(decode_table[index])
    return np.uint32(non_codec_entry(x, base))


@njit(cache=True)
def _codec_id_bits(ids, block, n, base, flags, flag_words):
    """Bit k set where ids[block + k] >= base (a codec id), for k < n <= 64; scratch and
    packing as in ``_char_start_bits``."""
    for k in range(n):
        flags[k] = ids[np.uint64(block + k)] >= base
    return _packed_flags(n, flags, flag_words)


@njit(inline="always", cache=True)
def _char_prefix(first_entry, hi_entry, lo_entry, has_prefix, prefix):
    """The prefix of a well-formed ``[prefix] hi lo`` with these decode entries (the first
    one read only ``has_prefix``), or NO_PREFIX if it is not one."""
    char_prefix = entry_payload(first_entry) if has_prefix else prefix
    well_formed = entry_kind(hi_entry) == KIND_HI and entry_kind(lo_entry) == KIND_LO
    return char_prefix if well_formed else NO_PREFIX


@njit(inline="always", cache=True)
def _write_char_bytes(char_prefix, hi_entry, lo_entry, out, o):
    hi, lo = entry_payload(hi_entry), entry_payload(lo_entry)
    out[o] = lead_byte(char_prefix, hi)
    out[o + _U1] = middle_byte(hi, lo)
    out[o + _U2] = last_byte(lo)


@njit(cache=True)
def _decode_dense(ids, start, stop, sequence_stop, decode_table, base, out, o, prefix):
    """Decode the units starting in [start, stop) one by one, branching on each id. The
    loop for output dense in codec ids, where "base id or not" is predicted well.

    Returns (next input position, next output position, prefix in force, malformed
    units, first one or -1). No counters in the loop: one more live register made it
    ~10% slower.
    """
    i, o = np.uint64(start), np.uint64(o)
    stop, sequence_stop, base = np.uint64(stop), np.uint64(sequence_stop), np.uint64(base)
    table_size = np.uint64(decode_table.size)
    n_bad = 0
    first_bad = -1
    while i < stop:
        x = ids[i]
        if x < base:  # a base id passes through and ends the prefix in force
            out[o] = x
            o += _U1
            prefix = NO_PREFIX
            i += _U1
            continue
        # [prefix] hi lo, the lookups written out (array-taking helpers with branches
        # cost an NRT incref/decref pair per call). Whether a prefix id comes first is
        # read from the id's range, not the table: the next position waits on one load.
        first = np.uint64(x) - base
        has_prefix = first >= _N_VALUES
        j = i + np.uint64(has_prefix)
        if j + _U1 < sequence_stop and first < table_size:
            hi_index = np.uint64(ids[j]) - base  # wraps to a huge value for base ids
            lo_index = np.uint64(ids[j + _U1]) - base
            if hi_index < _N_VALUES and lo_index < _N_VALUES:
                hi_entry, lo_entry = decode_table[hi_index], decode_table[lo_index]
                # the first entry is loaded either way: a select, not a branch
                char_prefix = _char_prefix(decode_table[first], hi_entry, lo_entry,
                                           has_prefix, prefix)
                if char_prefix != NO_PREFIX:
                    _write_char_bytes(char_prefix, hi_entry, lo_entry, out, o)
                    o += _U3
                    i = j + _U2
                    prefix = char_prefix
                    continue
        step, written, is_bad, prefix = _decode_slow_unit(ids, i, sequence_stop, decode_table,
                                                          base, prefix, out, o)
        if is_bad:
            n_bad += 1
            if first_bad < 0:
                first_bad = np.int64(i)
        i += step
        o += written
    return i, o, prefix, n_bad, first_bad


@njit(cache=True)
def _decode_span(ids, start, stop, sequence_stop, decode_table, base, out, out_start,
                 write_stop, dense, flags, flag_words):
    """Decode the units starting in [start, stop) of one sequence; write from out[out_start].

    Returns (next output position, malformed units, first one or -1, dense). Goes a
    block at a time: DENSE_RUN positions by ``_decode_dense`` while the positions
    before were dense in codec ids (``dense``: fewer than DENSE_PLAIN base ids per 64),
    else BLOCK positions by the codec id bit mask: base ids copied in runs, the units
    that start with a codec id visited one by one. Nothing is written at or after
    ``write_stop``; each position writes at most 3 ids. Scratch: ``flags`` and
    ``flag_words`` of ``_codec_id_bits``.
    """
    p, o = np.uint64(start), np.uint64(out_start)
    sequence_stop, base = np.uint64(sequence_stop), np.uint64(base)
    table_size = np.uint64(decode_table.size)
    prefix = NO_PREFIX
    n_bad = 0
    first_bad = -1
    dense_blocks = 0
    block = start
    while block < stop:
        if dense:
            block_stop = min(block + DENSE_RUN, stop)
            p, o, prefix, run_bad, run_first_bad = _decode_dense(
                ids, p, block_stop, sequence_stop, decode_table, base, out, o, prefix)
            n_bad += run_bad
            if first_bad < 0:
                first_bad = run_first_bad
            sample = max(block_stop - BLOCK, block)  # the density of the run's last block
            n = block_stop - sample
            n_plain = n - np.int64(_count_ones(_codec_id_bits(ids, sample, n, base, flags,
                                                              flag_words)))
            dense = n_plain * BLOCK < DENSE_PLAIN * n
            block = np.int64(p)
            continue
        block_start = np.uint64(block)
        n = min(BLOCK, stop - block)
        coded = _codec_id_bits(ids, block, n, base, flags, flag_words)
        dense_blocks = dense_blocks + 1 if np.int64(_count_ones(coded)) > n - DENSE_PLAIN else 0
        dense = dense_blocks >= 2  # as in _encode_span
        has_room = (3 * (block + BLOCK) + COPY_STEP <= write_stop
                    and block + BLOCK + COPY_STEP <= ids.size)
        while coded:
            i = block_start + _trailing_zeros(coded)
            prefix = prefix if i == p else NO_PREFIX  # a base id ends the prefix in force
            o = _copy_run(ids, p, i, out, o, has_room)
            first = np.uint64(ids[i]) - base  # as in _decode_dense
            has_prefix = first >= _N_VALUES
            j = i + np.uint64(has_prefix)
            char_prefix = NO_PREFIX
            if j + _U1 < sequence_stop and first < table_size:
                hi_index = np.uint64(ids[j]) - base
                lo_index = np.uint64(ids[j + _U1]) - base
                if hi_index < _N_VALUES and lo_index < _N_VALUES:
                    hi_entry, lo_entry = decode_table[hi_index], decode_table[lo_index]
                    char_prefix = _char_prefix(decode_table[first], hi_entry, lo_entry,
                                               has_prefix, prefix)
                    if char_prefix != NO_PREFIX:
                        _write_char_bytes(char_prefix, hi_entry, lo_entry, out, o)
                        o += _U3
                        p = j + _U2
                        prefix = char_prefix
            if char_prefix == NO_PREFIX:
                step, written, is_bad, prefix = _decode_slow_unit(
                    ids, i, sequence_stop, decode_table, base, prefix, out, o)
                if is_bad:
                    n_bad += 1
                    if first_bad < 0:
                        first_bad = np.int64(i)
                p = i + step
                o += written
            taken = p - block_start
            coded &= (_ALL_BITS << (taken & _63)) if taken < _64 else _U0
        block = np.int64(p) if dense else max(block + BLOCK, np.int64(p))
    o = _copy_run(ids, p, np.uint64(stop), out, o, 3 * stop + COPY_STEP <= write_stop
                  and stop + COPY_STEP <= ids.size)
    return np.int64(o), n_bad, first_bad, dense


@njit(cache=True)
def _decode_slow_unit(ids, i, sequence_stop, decode_table, base, prefix, out, o):
    """The unit at i when it is not a base id or a well-formed [prefix] hi lo: a prefix id
    before a hi id that has no lo, or a malformed unit (written as U+FFFD).

    Returns (ids it spans, ids written, whether malformed, the prefix in force after).
    """
    entry = _decode_entry(ids[i], decode_table, base)
    kind = entry_kind(entry)
    next_kind = KIND_END
    if i + _U1 < sequence_stop:
        next_kind = entry_kind(_decode_entry(ids[i + _U1], decode_table, base))
    if kind == KIND_PREFIX:
        prefix = np.int64(entry_payload(entry))
    elif kind == KIND_INVALID:
        prefix = NO_PREFIX
    # A lo reached here has no hi before it: a hi takes its lo along.
    if decode_unit(kind, next_kind, prefix != NO_PREFIX, False) == UNIT_EMPTY:
        return _U1, _U0, False, prefix
    for k in range(3):
        out[o + np.uint64(k)] = REPLACEMENT_BYTES[k]
    return (_U2 if kind == KIND_HI and next_kind == KIND_LO else _U1), _U3, True, prefix


@njit(cache=True)
def _decode_chunk(ids, offsets, chunk, bounds, decode_table, base, out, sequence_out,
                  sequence_chunk):
    """Decode chunk ``chunk`` into out[3 * start:]; record where its sequences begin."""
    start, stop = bounds[chunk], bounds[chunk + 1]
    i = start
    o = 3 * start
    sequence = np.searchsorted(offsets, start) - 1
    n_bad = 0
    first_bad = -1
    dense = False
    flags, flag_words = _flag_scratch()
    while i < stop:
        sequence = _enter_sequences(offsets, sequence, i, o, chunk, sequence_out,
                                    sequence_chunk)
        sequence_stop = offsets[sequence + 1]
        span_stop = min(stop, sequence_stop)
        o, span_bad, span_first, dense = _decode_span(ids, i, span_stop, sequence_stop,
                                                      decode_table, base, out, o, 3 * stop,
                                                      dense, flags, flag_words)
        i = span_stop
        n_bad += span_bad
        if first_bad < 0:
            first_bad = span_first
    return o - 3 * start, n_bad, first_bad


def bitlevel_decode_cpu(ids, offsets, decode_table, base_vocab_size, n_chunks=None):
    """Decode with Numba: one sequential loop per chunk of positions, chunks in parallel.

    Returns ``(out_ids, out_offsets, n_malformed, first_malformed)``. ``n_chunks`` as
    for encoding. Scratch: an output buffer of 3 * len(ids) ids (decoding grows at
    most 3x); only the pages written are touched, and with one chunk the buffer is
    returned, trimmed.
    """
    bounds = _plan_chunks(ids, offsets, n_chunks or numba.get_num_threads(), True,
                          decode_table, base_vocab_size, decode_table.size)
    out = np.empty(3 * ids.size, dtype=np.uint32)
    chunk_lengths, chunk_bad, chunk_first_bad, sequence_out, sequence_chunk = _decode_chunks(
        ids, offsets, bounds, decode_table, base_vocab_size, out)
    joined, out_offsets = _join_chunks(out, bounds, 3, chunk_lengths, sequence_out,
                                       sequence_chunk)
    return joined, out_offsets, int(chunk_bad.sum()), _first_found(chunk_first_bad)


@njit(parallel=True, cache=True)
def _decode_chunks(ids, offsets, bounds, decode_table, base_vocab_size, out):
    """Run ``_decode_chunk`` on every chunk, in parallel; gather what each one reports."""
    n_chunks = bounds.size - 1
    chunk_lengths = np.empty(n_chunks, dtype=np.int64)
    chunk_bad = np.empty(n_chunks, dtype=np.int64)
    chunk_first_bad = np.empty(n_chunks, dtype=np.int64)
    sequence_out = np.full(offsets.size, -1, dtype=np.int64)
    sequence_chunk = np.zeros(offsets.size, dtype=np.int64)
    for c in prange(n_chunks):
        result = _decode_chunk(ids, offsets, c, bounds, decode_table, base_vocab_size, out,
                               sequence_out, sequence_chunk)
        chunk_lengths[c] = result[0]
        chunk_bad[c] = result[1]
        chunk_first_bad[c] = result[2]
    return chunk_lengths, chunk_bad, chunk_first_bad, sequence_out, sequence_chunk


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
    boundary = xp.zeros(n + 1, dtype=xp.uint8)
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
    char_prefix = xp.empty(n, dtype=xp.uint32)
    launch(encode_char_prefix_kernel, n, ids, boundary, lead_prefix_ids, char_prefix)
    lengths = xp.empty(n, dtype=xp.uint8)
    first_bad = xp.full(1, n, dtype=xp.int64)
    launch(encode_lengths_kernel, n, ids, boundary, char_prefix, base_vocab_size, lengths,
            first_bad)
    positions = exclusive_scan(xp, lengths)
    out = xp.empty(n, dtype=xp.uint32)  # encoding never grows: no read of the total needed yet
    launch(encode_scatter_kernel, n, ids, char_prefix, lengths, positions, value_ids, out)
    total, bad = xp.concatenate((positions[-1:], first_bad)).tolist()  # sync
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
    entries = xp.empty(n, dtype=xp.uint32)
    events = xp.empty(n, dtype=xp.uint8)
    launch(decode_classify_kernel, n, ids, boundary, decode_table, base_vocab_size, entries,
            events)
    event_rank = xp.cumsum(events, dtype=xp.int64)
    event_prefix = xp.empty(n, dtype=xp.int64)
    launch(decode_record_events_kernel, n, entries, events, event_rank, event_prefix)
    units = xp.empty(n, dtype=xp.uint8)
    lengths = xp.empty(n, dtype=xp.uint8)
    malformed = xp.asarray([0, n], dtype=xp.int64)
    launch(decode_units_kernel, n, entries, boundary, event_rank, event_prefix, units, lengths,
            malformed)
    positions = exclusive_scan(xp, lengths)
    total, n_bad, first_bad = xp.concatenate((positions[-1:], malformed)).tolist()  # sync
    out = xp.empty(total, dtype=xp.uint32)
    launch(decode_scatter_kernel, n, ids, entries, units, event_rank, event_prefix, positions,
            out)
    return out, positions[offsets], n_bad, first_bad if n_bad else -1


# Performance notes
# -----------------
# bench/bitlevel_bench.py, one thread, 20M ids, on a shared 2-core Xeon VM (another job
# running, so +-30% between runs and the machine's speed drifts by up to 2x over minutes);
# ratio = np.copy time / codec time, same input array. Compare only ratios from one run,
# or old and new kernels interleaved in one process. Numbers: bench/RESULTS.md.
#
# What helped, in the order it was found:
# - Output allocated by NumPy in the Python wrapper, not by np.empty inside @njit:
#   NumPy asks for transparent huge pages, Numba's allocator does not, and first-touch
#   page faults were most of the cost (alloc + fill of 20M ids: 44 ms -> 23-30 ms;
#   np.copy itself spends about half of its time in page faults here).
# - uint64 indices in the hot loops: Numba adds a negative-index fix-up to every signed
#   index. Encode on byte-heavy ids: 0.25 -> 0.48 G ids/s in a micro benchmark.
# - Typed arithmetic: Numba widens uint32 to uint64, and uint64 meets int64 as float64;
#   the decode loop compared kinds as doubles. Found by scanning the LLVM IR for
#   sitofp/fcmp; the helpers now cast to int64 and none remain.
# - No array arguments to inline="always" helpers that branch or return early:
#   Numba-IR inlining leaves an atomic NRT incref/decref pair around every call (seen
#   again in 2026-11: a decode helper with three returns made decode 2-3x slower).
#   Branch-free helpers with one basic block (_encode_char, _copy8) are fine; the
#   decoders write their table lookups in the loop.
# - Branches made selects where the data decides at random: "is there a prefix id
#   before this hi" comes from the id's range (cmov for the next position), and the
#   prefix entry is loaded unconditionally so LLVM selects instead of branching
#   (decode, byte-heavy: loop time ~30 -> ~18 ms per 10M ids); the encoder writes the
#   prefix unconditionally and advances past it only when it changes.
# - One test for both continuation bytes: ((b2 ^ 0x80) | (b3 ^ 0x80)) < 0x40.
# - Bit masks instead of a branch per id (2026-11), for mixed output: a vectorised
#   loop flags where characters (codec ids) start in 64 positions, the scalar loop
#   walks the set bits (tzcnt/blsr) and copies the ids between them 16 at a time.
#   The mispredicted "byte or merged token" branch becomes one loop exit per 64
#   positions. Old and new interleaved in one process, mixed: encode 1.5-1.7x
#   (0.26-0.30 -> 0.39-0.52 of copy speed), decode 1.2-1.3x (0.30-0.34 -> 0.36-0.43).
# - Packing 64 flag bytes into a word with 8 multiplies (flags * 0x0102040810204080
#   >> 56 gathers 8 flags), not `mask |= flag << k`: LLVM vectorised the latter as a
#   64-bit-lane reduction; the mask pass went 23-28 ms -> 15-17 ms per 20M ids (about
#   9 ms of it is reading the input from memory).
# - Dense output keeps the per-id loop: where nearly every id is a byte of a character
#   the branch is predicted and the mask pass is pure overhead (bit-mask path on
#   "bytes": encode 0.32-0.40 vs 0.47-0.55 for the old loop). Each span switches per
#   block: two dense bit-mask blocks in a row (DENSE_CHARS characters per 64; decoding:
#   fewer than DENSE_PLAIN base ids) hand over to the per-id loop, which runs DENSE_RUN
#   positions at a time while a 64-position sample at the end of each run is dense.
#   A sample, not a counter in the loop: a counter cost the per-id loops ~10% (one
#   more live register). Runs of 256 instead of 4096 cost "bytes" ~5-10%; one dense
#   block by chance (1 in ~70 on "mixed") is why two in a row are asked for.
# - Copies of 8 ids written as 8 loads, then 8 stores: LLVM then emits one vector move
#   (a plain loop stays scalar: it cannot rule out that out and ids overlap).
#
# Tried and dropped:
# - A fully branch-free step per character or per id: the position of the next step
#   then waits on a load, a table lookup and a compare (a loop-carried chain); slower
#   than the predicted branches even on "mixed" (0.22-0.25 vs 0.28-0.31 G ids/s).
#   Tried again (2026-11) as one store per input position (prefix at the lead byte,
#   hi and lo at the continuation bytes, advance 0 or 1): ~75 instructions per id
#   after LLVM's select-to-branch passes were worked around; 0.11-0.18 of copy speed.
#   LLVM turns selects whose operand is a table load back into branches
#   (CodeGenPrepare, x86 cmov conversion); only global LLVM options stop it.
# - Two passes (output lengths, then scatter), as on the GPU: 0.06-0.07 G ids/s; more
#   memory traffic, and the first pass did not vectorise with table gathers. Retried
#   (2026-11) in L1-sized blocks of 1024 (vectorised "what each position writes", then
#   a scalar compacting loop doing the table look-up): 0.28 mixed / 0.33 bytes. LLVM
#   emits no gathers for this CPU (checked: a plain table[idx[k]] loop stays scalar).
# - Joining the decoder's range tests into one "&" branch with clamped loads: more
#   work on every character; decode got slower (22 -> 27 ms per 10M ids).
# - The bit-mask decoder continuing through a run of codec ids without going back to
#   the mask: no gain on "mixed"; the per-id loop does that better on dense output.
# - COPY_STEP 8 instead of 16: runs over 8 ids (9% of them on "mixed") take a second,
#   mispredicted, step; not faster.
# - Moving the output 2 KiB off the input's 4 KiB alignment (4K aliasing): no change.
#
# What is left: on mixed output each character still costs ~30 instructions plus a
# copy; the bit loop mispredicts once per 64 positions; the decoder's next unit waits
# on the previous one (tzcnt after a mask update that depends on a load). Both
# encoders' first pass reads the input from memory, which alone is ~1/3 of np.copy's
# time. Several threads help only where cores are free: on this busy 2-core VM two
# threads were slower than one (each chunk's output is also copied once to join).
#
# How far the sequential decoder can go (2026-11-22, throwaway loops on the "bytes"
# corpus, 17.1M coded ids, same process as np.copy): a minimal decode loop with no
# validation and arithmetic in place of the table lookups ran at 0.41-0.42 of copy,
# against 0.33-0.36 for the real decoder in that run. The floor of a loop whose next
# position waits on the id just read is already below the 0.5 target here. Finding
# runs of "hi lo" pairs first and decoding them at a fixed stride was slower still
# (0.18: the run scan has its own per-pair branch chain). What might reach it: the
# positions of prefix and base ids from a vectorised mask pass (as the encoder does for
# character starts), then fixed-stride pair decoding between them; not written.
