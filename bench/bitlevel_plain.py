"""The bit-level codec as plain Numba loops, for ``bitlevel_bench.py``'s "without the
LLVM IR" rows (issue 18): the best plain loops written for the CPU target, kept here so
that the comparison can be rerun. ``gpubpe.kernels.bitpack`` keeps the 16-lane steps
(``kernels/_lanes.py``) because they were faster on real CJK text (bench/RESULTS.md).

Variants tried, one core, real zh+ja lines of tests/data/multiscript.txt (ratio to
np.copy, 4M ids, 2026-11-23, shared 2-core EPYC VM, process time):
- one unit (a character or an id) per step, branchy: encode 0.18, decode 0.10;
- one unit per step, branch-free (three slots written, advance by what was kept):
  no faster; the next step's loads wait on this step's two loads (ids[i], then the
  lead-byte table), ~11 cycles a unit;
- one position per step (below): the only chain between steps is the output
  position, but LLVM turns the selects back into branches: encode 0.11-0.16, decode
  0.05-0.07, where the lane steps gave 0.18-0.20 and 0.08-0.11.
"""

import numba
import numpy as np
from numba import njit, prange

from gpubpe.kernels.bitpack import (
    _NONE,
    KIND_HI,
    KIND_INVALID,
    KIND_LO,
    KIND_PASS,
    KIND_PREFIX,
    LANES,
    _chunk_sources,
    _decode_units,
    _enter_sequences,
    _first_found,
    _join_chunks,
    _one_by_one,
    _plan_chunks,
    entry_kind,
    entry_payload,
    hi_value,
    last_byte,
    lead_byte,
    lo_value,
    middle_byte,
)


@njit(cache=True)
def _encode_sequence_plain(ids, start, stop, lead_prefix_ids, value_ids, base, out, o):
    """Encode ids[start:stop], one sequence, into out[o:]; return (next output position,
    first bad position or -1).

    One step per position, not per character: whether a character starts at p does not
    depend on where the previous one started (a continuation byte is never a lead
    byte), so each position works out the one id it writes, if any, from the character
    starts 0-3 positions back, kept in registers. The only chain from one step to the
    next is the output position; a unit-at-a-time loop waits on two loads per unit.
    Writes one slot past its output.
    """
    one, two = np.uint64(1), np.uint64(2)
    o = np.uint64(o)
    first_bad = -1
    # the character starts (as prefix ids, 0 for none) at p - 1, p - 2, p - 3, and ids[p - 1]
    back1, back2, back3, before = np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0)
    last_start = np.uint64(max(stop - 2, 0))
    for p in range(np.uint64(start), np.uint64(max(stop, start))):
        x = ids[p]
        here = np.uint32(0)
        if p < last_start:  # a branch taken the same way until the sequence's last ids
            b2, b3 = ids[p + one], ids[p + two]
            lead_prefix = lead_prefix_ids[x & 255]
            continues = ((b2 ^ 0x80) | (b3 ^ 0x80)) < 0x40
            here = lead_prefix if (x < 256) & continues else np.uint32(0)
        hi_id = value_ids[hi_value(before, x) & 511]
        lo_id = value_ids[lo_value(before, x) & 511]
        out[o] = here if here != 0 else (hi_id if back1 != 0 else (lo_id if back2 != 0 else x))
        copied = (here == 0) & (back1 == 0) & (back2 == 0)
        o += np.uint64(here != back3 or here == 0)  # a repeated prefix is dropped
        if copied & (x >= base) & (first_bad < 0):
            first_bad = np.int64(p)
        back1, back2, back3, before = here, back1, back2, x
    return np.int64(o), first_bad


@njit(cache=True)
def _encode_chunk_plain(ids, offsets, chunk, bounds, source, lead_prefix_ids, value_ids, base,
                        out, sequence_out):
    start, stop = bounds[chunk], bounds[chunk + 1]
    i, o = start, source
    sequence = np.searchsorted(offsets, start) - 1
    first_bad = -1
    while i < stop:
        sequence = _enter_sequences(offsets, sequence, i, o, chunk, sequence_out)
        span_stop = min(stop, offsets[sequence + 1])
        o, bad = _encode_sequence_plain(ids, i, span_stop, lead_prefix_ids, value_ids, base,
                                        out, o)
        i = span_stop
        if first_bad < 0:
            first_bad = bad
    return o - source, first_bad


@njit(parallel=True, cache=True)
def _encode_chunks_plain(ids, offsets, bounds, sources, lead_prefix_ids, value_ids,
                         base_vocab_size, out):
    n_chunks = bounds.size - 1
    chunk_lengths = np.empty(n_chunks, dtype=np.int64)
    chunk_first_bad = np.empty(n_chunks, dtype=np.int64)
    sequence_out = np.full(offsets.size + n_chunks, -1, dtype=np.int64)  # + spare slots
    for c in prange(n_chunks):
        result = _encode_chunk_plain(ids, offsets, c, bounds, sources[c], lead_prefix_ids,
                                     value_ids, base_vocab_size, out, sequence_out)
        chunk_lengths[c] = result[0]
        chunk_first_bad[c] = result[1]
    return chunk_lengths, chunk_first_bad, sequence_out


def bitlevel_encode_cpu_plain(ids, offsets, lead_prefix_ids, value_ids, base_vocab_size,
                              n_chunks=None):
    bounds = _plan_chunks(ids, offsets, n_chunks or numba.get_num_threads(), False,
                          lead_prefix_ids, base_vocab_size, 0)
    sources = _chunk_sources(bounds, 1)
    out = np.empty(ids.size + LANES * sources.size, dtype=np.uint32)
    chunk_lengths, chunk_first_bad, sequence_out = _encode_chunks_plain(
        ids, offsets, bounds, sources, lead_prefix_ids, value_ids, base_vocab_size, out)
    joined, out_offsets = _join_chunks(out, sources, chunk_lengths, sequence_out, offsets,
                                       bounds, _one_by_one)
    return joined, out_offsets, _first_found(chunk_first_bad)


@njit(cache=True)
def _decode_well_formed(ids, start, stop, decode_table, base, out, o):
    """Decode ids[start:stop] of one sequence into out[o:] if every unit is well formed;
    return (next output position, whether they all were).

    One step per position: a base id writes itself, a hi id the lead byte, a lo id the
    middle byte (from the hi value before it) and the last; a prefix id nothing. Each
    step checks its id against the one before it; the chain from step to step is the
    output position, the prefix in force and the previous id's kind and value, all in
    registers. Writes two slots per step, so up to two past its output.
    """
    zero, one = np.uint64(0), np.uint64(1)
    o = np.uint64(o)
    base, table_size = np.uint64(base), np.uint64(decode_table.size)
    prefix, previous_kind, previous_value = np.int64(0), np.int64(KIND_PASS), np.int64(0)
    well_formed = True
    for p in range(np.uint64(start), np.uint64(max(stop, start))):
        x = np.uint64(ids[p])
        index = x - base  # wraps to a huge value below base
        in_table = index < table_size
        entry = np.int64(decode_table[index if in_table else zero])
        kind = entry_kind(entry) if in_table else (KIND_PASS if x < base else KIND_INVALID)
        value = entry_payload(entry)
        well_formed &= (kind != KIND_INVALID) & ((kind == KIND_LO) == (previous_kind == KIND_HI))
        well_formed &= (previous_kind != KIND_PREFIX) | (kind == KIND_HI)
        well_formed &= (kind != KIND_HI) | (prefix != 0)
        out[o] = np.int64(x) if kind == KIND_PASS else (
            lead_byte(prefix, value) if kind == KIND_HI else middle_byte(previous_value, value))
        out[o + one] = last_byte(value)
        o += np.uint64(1 if (kind == KIND_PASS) | (kind == KIND_HI) else
                       (2 if kind == KIND_LO else 0))
        prefix = value if kind == KIND_PREFIX else (
            np.int64(0) if (kind == KIND_PASS) | (kind == KIND_INVALID) else prefix)
        previous_kind, previous_value = kind, value
    well_formed &= (previous_kind != KIND_HI) & (previous_kind != KIND_PREFIX)
    return np.int64(o), well_formed


@njit(cache=True)
def _decode_sequence_plain(ids, start, stop, decode_table, base, out, o):
    """Decode ids[start:stop], one sequence, into out[o:]; a sequence with a malformed
    unit is redone one unit at a time (``_decode_units``). Returns (next output
    position, malformed units, first one or -1)."""
    end, well_formed = _decode_well_formed(ids, start, stop, decode_table, base, out, o)
    if well_formed:
        return end, 0, -1
    _, end, _, n_bad, first_bad = _decode_units(ids, start, stop, stop, decode_table, base,
                                                out, o, _NONE)
    return end, n_bad, first_bad


@njit(cache=True)
def _decode_chunk_plain(ids, offsets, chunk, bounds, source, decode_table, base, out,
                        sequence_out):
    start, stop = bounds[chunk], bounds[chunk + 1]
    i, o = start, source
    sequence = np.searchsorted(offsets, start) - 1
    n_bad, first_bad = 0, -1
    while i < stop:
        sequence = _enter_sequences(offsets, sequence, i, o, chunk, sequence_out)
        span_stop = min(stop, offsets[sequence + 1])
        o, span_bad, span_first = _decode_sequence_plain(ids, i, span_stop, decode_table, base,
                                                         out, o)
        i = span_stop
        n_bad += span_bad
        if first_bad < 0:
            first_bad = span_first
    return o - source, n_bad, first_bad


@njit(parallel=True, cache=True)
def _decode_chunks_plain(ids, offsets, bounds, sources, decode_table, base_vocab_size, out):
    n_chunks = bounds.size - 1
    chunk_lengths = np.empty(n_chunks, dtype=np.int64)
    chunk_bad = np.empty(n_chunks, dtype=np.int64)
    chunk_first_bad = np.empty(n_chunks, dtype=np.int64)
    sequence_out = np.full(offsets.size + n_chunks, -1, dtype=np.int64)  # + spare slots
    for c in prange(n_chunks):
        result = _decode_chunk_plain(ids, offsets, c, bounds, sources[c], decode_table,
                                     base_vocab_size, out, sequence_out)
        chunk_lengths[c] = result[0]
        chunk_bad[c] = result[1]
        chunk_first_bad[c] = result[2]
    return chunk_lengths, chunk_bad, chunk_first_bad, sequence_out


def bitlevel_decode_cpu_plain(ids, offsets, decode_table, base_vocab_size, n_chunks=None):
    bounds = _plan_chunks(ids, offsets, n_chunks or numba.get_num_threads(), True,
                          decode_table, base_vocab_size, decode_table.size)
    sources = _chunk_sources(bounds, 3)
    out = np.empty(3 * ids.size + LANES * sources.size, dtype=np.uint32)
    chunk_lengths, chunk_bad, chunk_first_bad, sequence_out = \
        _decode_chunks_plain(ids, offsets, bounds, sources, decode_table, base_vocab_size, out)
    joined, out_offsets = _join_chunks(out, sources, chunk_lengths, sequence_out, offsets,
                                       bounds, _one_by_one)
    return joined, out_offsets, int(chunk_bad.sum()), _first_found(chunk_first_bad)


