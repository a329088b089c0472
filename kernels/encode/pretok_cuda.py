"""CUDA target of the pre-tokenizers: piece starts and word counts of segments on the device.

The device runs the CPU's own scanner (``kernels.pretok``) in parallel, in two
steps (the plan the ``pretok`` docstring sets out):

1. Cut the text where a piece boundary is certain: every segment start, and
   every ``safe_cut`` position (a space or tab after an ASCII non-space), a
   local test run by one thread per byte. Segment ends are marked as stops.
2. One thread per chunk between consecutive cuts runs ``pretok.piece_end``
   from the chunk's start to its end, marking each piece start. Because a
   safe cut is a boundary whatever came before, the pieces equal
   ``pretok.split_ends`` on the whole segment (tested on every Unicode
   general category, invalid UTF-8 and random text in the simulator).

Marks (uint8, one per byte, ``piece_marks_cuda``): ``PIECE_START`` where a
piece starts inside a segment, ``SEGMENT_STOP`` at the first byte after a
segment that no segment continues, 0 elsewhere. Words for counting are the
spans between consecutive nonzero marks that start at a ``PIECE_START``.

Segments are ``[seg_start[k], seg_end[k])`` byte ranges (documents, or text
between special tokens), int64 device arrays; they must not overlap (empty
ones are skipped); bytes outside every segment are never split or counted.
Nothing on the device checks this: the callers (``gpubpe.pretokenize``,
``gpubpe.device``) build them so.

Kernels, launch shapes and scratch (n = bytes, S = segments, B = marks):

- ``segment_bounds_kernel``: a thread per segment, grid-stride. Marks its start,
  and +1/-1 at its ends into ``depth`` (int32, n + 1; atomics, since one
  segment's end may be the next one's start); ``cumsum(depth)`` then says which
  bytes lie inside a segment (int32, n).
- ``mark_cuts_kernel``: a thread per byte, grid-stride: safe cuts and stops.
- ``compact_marks_kernel``: a thread per byte, grid-stride: the positions of
  the nonzero marks, at their exclusive prefix count (scan int64, n + 1;
  positions int64, n + 1). Scan + scatter: no data-sized host read.
- ``piece_starts_kernel``: a thread per chunk, grid-stride over the chunk count
  the scan left on the device (launched for n items: no host read to size it).
- Counting (``count_words_cuda``): ``count_insert_kernel``, a thread per mark,
  claims the word's key in an open-addressing table with atomicCAS (the word
  key of ``encode.words.word_key``: words of up to 7 bytes are their own key,
  longer ones a 56-bit hash), adds 1 to its int64 count and keeps its first
  position with atomic min; ``long_word_check_kernel`` compares every long word
  with the first word of its cell (a 56-bit collision makes the caller count
  the batch on the CPU, as the CPU counter does on a 64-bit one);
  ``gather_words_kernel``, a thread per cell, compacts the table.

Syncs: ``word_start_flags_cuda`` none (its result stays on the device);
``count_words_cuda`` three per call (the mark count that sizes the table; the
distinct count with the collision flag; the result), whatever the data.

Paper estimate for an H100 (``shared/GPU_FACTS.md``: 2.7 TB/s device copy,
a launch 17-43 us, a sync 17 us) -- an estimate, nothing here was timed on a
GPU. Per byte, the data-sized passes move about: bounds + cumsum 12 B, cuts
2 B, scan 9 B + scatter ~3 B (twice when counting), flags 2 B: ~30-45 B per
byte, ~15 ms for 1 GB at 2.7 TB/s. The chunk kernel runs the CPU scanner's
~10-30 instructions per byte in each thread; with English chunks of ~6 bytes
the warps stay busy, and 132 SMs x 2048 threads at ~1 byte per ~20 cycles
each give a bound near 20 GB/s, far above the 2 GB/s the issue asks. Text
without ASCII spaces (Chinese, Japanese) has few safe cuts: a segment is one
chunk, so one thread scans a whole document; 2 KB documents are fine, a single
100 MB document is not (a thread runs at perhaps 50-200 MB/s). Launches: 6
per call for the flags, 11 for counting, plus CuPy's scans and sort.

Performance notes:
- PTX without a device: Numba compiles the ``@njit`` helpers that a kernel
  calls as device functions and asks the current device for its compute
  capability first, which fails where there is none; inlining every helper at
  Numba IR level instead took 53-207 s per kernel (``pretok`` notes).
  ``cuda_kernels.compile_ptx`` hands Numba the target architecture instead,
  so each helper compiles once and NVVM inlines it: the chunk kernel (all
  three scanners) compiles in ~10 s on the loaded 2-core VM.
- The chunk kernel writes its piece starts into the marks it reads its chunks
  from: a piece start lies strictly inside its chunk, never at another chunk's
  start, so no thread reads what another writes.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, njit

from .._cuda import (
    device_empty,
    device_full,
    device_function,
    device_zeros,
    exclusive_scan,
    launch,
    read_scalar,
    to_host,
)
from ..hashing import EMPTY_KEY, mix64
from ..pretok import piece_end, safe_cut
from .words import word_key

PIECE_START = 1
SEGMENT_STOP = 2
NO_POSITION = np.iinfo(np.int64).max
MIN_TABLE_CELLS = 1024
# control[] of the counting step, read back in one copy.
N_DISTINCT, COLLIDED = 0, 1

_piece_end = device_function(piece_end)
_safe_cut = device_function(safe_cut)
_word_key = device_function(word_key)
_mix64 = device_function(mix64)


# ---------------------------------------------------------------- piece starts


@cuda.jit
def segment_bounds_kernel(seg_start, seg_end, depth, marks):
    """Mark each non-empty segment's start; +1 at its start and -1 at its end into ``depth``.

    Launch: a thread per segment, grid-stride. ``depth`` (int32, n + 1) starts at 0.
    """
    for k in range(cuda.grid(1), seg_start.size, cuda.gridsize(1)):
        start = seg_start[k]
        end = seg_end[k]
        if start < end:
            marks[start] = PIECE_START
            cuda.atomic.add(depth, start, 1)
            cuda.atomic.add(depth, end, -1)


@cuda.jit
def mark_cuts_kernel(data, inside, scanner, table, marks):
    """Mark safe cuts inside segments (``PIECE_START``) and segment stops (``SEGMENT_STOP``).

    ``inside[p]`` is nonzero for a byte inside a segment. A byte inside that is
    not a segment start has its predecessor in the same segment, as
    ``safe_cut`` needs. Launch: a thread per byte, grid-stride; no scratch.
    """
    for p in range(cuda.grid(1), data.size, cuda.gridsize(1)):
        if inside[p] != 0:
            if marks[p] == 0 and _safe_cut(data, p, p + 1, scanner, table) == p:
                marks[p] = PIECE_START
        elif p > 0 and inside[p - 1] != 0:
            marks[p] = SEGMENT_STOP


@cuda.jit
def compact_marks_kernel(marks, scan, positions):
    """positions[scan[p]] = p for every nonzero mark; positions[scan[n]] = n (the end).

    ``scan`` is the exclusive prefix count of nonzero marks (n + 1). Launch: a
    thread per byte, grid-stride; ``positions`` int64, n + 1 (the worst case).
    """
    n = marks.size
    for p in range(cuda.grid(1), n, cuda.gridsize(1)):
        if marks[p] != 0:
            positions[scan[p]] = p
        if p == 0:
            positions[scan[n]] = n


@cuda.jit
def piece_starts_kernel(data, positions, scan, scanner, table, marks):
    """Scan each chunk that starts with ``PIECE_START`` by ``piece_end``; mark its piece starts.

    Chunk c is ``[positions[c], positions[c + 1])``; there are ``scan[n]``
    chunks, read on the device. Launch: a thread per chunk, grid-stride,
    sized for n (no host read); no scratch.
    """
    n_chunks = scan[scan.size - 1]
    for c in range(cuda.grid(1), n_chunks, cuda.gridsize(1)):
        start = positions[c]
        if marks[start] == PIECE_START:
            end = positions[c + 1]
            at = _piece_end(scanner, data, start, end, table)
            while at < end:
                marks[at] = PIECE_START
                at = _piece_end(scanner, data, at, end, table)


def _positions_of_marks(marks, xp):
    """(scan, positions): the exclusive count of nonzero marks, and where they are (device)."""
    scan = exclusive_scan(xp, marks != 0)
    positions = device_empty(xp, marks.size + 1, xp.int64)
    launch(compact_marks_kernel, marks.size, marks, scan, positions)
    return scan, positions


def piece_marks_cuda(data, seg_start, seg_end, scanner, table, xp):
    """uint8 marks of ``data``: ``PIECE_START`` at piece starts, ``SEGMENT_STOP`` after
    segments. All on the device, no sync (see the module notes)."""
    n = data.size
    marks = device_zeros(xp, n, xp.uint8)
    depth = device_zeros(xp, n + 1, xp.int32)
    launch(segment_bounds_kernel, seg_start.size, seg_start, seg_end, depth, marks)
    inside = xp.cumsum(depth[:n], dtype=xp.int32)
    launch(mark_cuts_kernel, n, data, inside, scanner, table, marks)
    del depth, inside
    scan, positions = _positions_of_marks(marks, xp)
    launch(piece_starts_kernel, n, data, positions, scan, scanner, table, marks)
    return marks


def word_start_flags_cuda(data, seg_start, seg_end, scanner, table, xp):
    """uint8 device array of len(data): 1 where a piece (word) starts inside a segment, else 0.

    ``data`` uint8, ``seg_start``/``seg_end`` int64 device arrays (segments must
    not overlap); ``scanner`` is ``pretok.GPT2``, ``CL100K`` or ``O200K`` and
    ``table`` its class table on the device (``gpubpe.pretokenize.scanner_table``).
    Equal to ``pretok.split_ends`` on every segment. No sync.
    """
    marks = piece_marks_cuda(data, seg_start, seg_end, scanner, table, xp)
    return (marks == PIECE_START).astype(xp.uint8)


# ---------------------------------------------------------------- word counts


@cuda.jit
def count_insert_kernel(data, positions, scan, marks, keys, counts, first, lengths):
    """Add each word to the table: claim its key's cell, count it, keep its first position.

    Word k spans ``[positions[k], positions[k + 1])`` when it starts at a
    ``PIECE_START``. Launch: a thread per mark, grid-stride, sized for the mark
    count; the table (``keys`` uint64 EMPTY_KEY, ``counts`` int64 0, ``first``
    int64 NO_POSITION, ``lengths`` int64) has a power-of-two size above twice that.
    """
    mask = np.uint64(keys.size - 1)
    for k in range(cuda.grid(1), scan[scan.size - 1], cuda.gridsize(1)):
        start = positions[k]
        if marks[start] != PIECE_START:
            continue
        stop = positions[k + 1]
        key = _word_key(data, start, stop)
        cell = _mix64(key) & mask
        while True:
            stored = keys[cell]
            if stored == EMPTY_KEY:
                stored = cuda.atomic.cas(keys, cell, EMPTY_KEY, key)
                if stored == EMPTY_KEY:
                    stored = key
            if stored == key:
                break
            cell = (cell + np.uint64(1)) & mask
        cuda.atomic.add(counts, cell, 1)
        cuda.atomic.min(first, cell, start)
        lengths[cell] = stop - start  # the same for every word of a cell, unless collided


@njit(inline="always")
def _same_word_inline(data, marks, other, start, length):
    """Whether the word at ``other`` (up to its next nonzero mark) is data[start:start+length]."""
    stop = other + length
    if stop > marks.size or (stop < marks.size and marks[stop] == 0):
        return False
    for j in range(length):
        if data[other + j] != data[start + j] or (j > 0 and marks[other + j] != 0):
            return False
    return True


_same_word = device_function(_same_word_inline)


@cuda.jit
def long_word_check_kernel(data, positions, scan, marks, keys, first, control):
    """Set control[COLLIDED] when a long word differs from the first word of its cell.

    The first word of a cell spans from ``first[cell]`` to its next nonzero
    mark. Launch: a thread per mark, grid-stride, after ``count_insert_kernel``.
    """
    mask = np.uint64(keys.size - 1)
    for k in range(cuda.grid(1), scan[scan.size - 1], cuda.gridsize(1)):
        start = positions[k]
        length = positions[k + 1] - start
        if marks[start] != PIECE_START or length <= 7:
            continue
        key = _word_key(data, start, start + length)
        cell = _mix64(key) & mask
        while keys[cell] != key:
            cell = (cell + np.uint64(1)) & mask
        if not _same_word(data, marks, first[cell], start, length):
            control[COLLIDED] = 1


@cuda.jit
def gather_words_kernel(keys, scan, first, lengths, counts, word_at, word_len, word_count,
                        control):
    """Write the occupied cells' (first position, length, count) at their scan index.

    Launch: a thread per cell, grid-stride; thread 0 writes the distinct count
    to control[N_DISTINCT]. Outputs hold one entry per cell (the worst case);
    unused ``word_at`` entries keep NO_POSITION, so they sort last.
    """
    for cell in range(cuda.grid(1), keys.size, cuda.gridsize(1)):
        if keys[cell] != EMPTY_KEY:
            at = scan[cell]
            word_at[at] = first[cell]
            word_len[at] = lengths[cell]
            word_count[at] = counts[cell]
        if cell == 0:
            control[N_DISTINCT] = scan[keys.size]


def table_cells_for(n_marks: int) -> int:
    """Cells of the counting table: a power of two at least twice the words (marks)."""
    return max(MIN_TABLE_CELLS, 1 << int(2 * n_marks - 1).bit_length())


def count_words_cuda(data, seg_start, seg_end, scanner, table, xp):
    """Distinct words of the segments with int64 counts, counted on the device.

    Arguments as :func:`word_start_flags_cuda`. Returns host arrays
    ``(word_at, word_len, word_count, collided)`` in order of first occurrence,
    as ``pretok.count_scanned_words`` does: the same words and counts. When
    ``collided`` (two long words shared a 56-bit key) the arrays are empty
    and the caller counts another way. Three syncs.
    """
    marks = piece_marks_cuda(data, seg_start, seg_end, scanner, table, xp)
    scan, positions = _positions_of_marks(marks, xp)
    n_marks = read_scalar(scan, -1, "word count (sizes the table)")  # sync
    n_cells = table_cells_for(n_marks)
    keys = device_full(xp, n_cells, EMPTY_KEY, xp.uint64)
    counts = device_zeros(xp, n_cells, xp.int64)
    first = device_full(xp, n_cells, NO_POSITION, xp.int64)
    lengths = device_zeros(xp, n_cells, xp.int64)
    control = device_zeros(xp, 2, xp.int64)
    launch(count_insert_kernel, n_marks, data, positions, scan, marks, keys, counts, first,
           lengths)
    launch(long_word_check_kernel, n_marks, data, positions, scan, marks, keys, first, control)
    cell_scan = exclusive_scan(xp, keys != EMPTY_KEY)
    words = device_full(xp, (3, n_cells), NO_POSITION, xp.int64)
    launch(gather_words_kernel, n_cells, keys, cell_scan, first, lengths, counts, words[0],
           words[1], words[2], control)
    n_distinct, collided = to_host(control, "distinct words, collision flag").tolist()  # sync
    if collided:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, True
    in_order = words[:, xp.argsort(words[0])[:n_distinct]]
    word_at, word_len, word_count = to_host(in_order, "distinct words and counts")  # sync
    return word_at, word_len, word_count, False


# Every @cuda.jit kernel of this module with its launch signature (PTX test: sm_80, sm_90).
PRETOK_CUDA_SIGNATURES = {
    segment_bounds_kernel: "void(int64[::1], int64[::1], int32[::1], uint8[::1])",
    mark_cuts_kernel: "void(uint8[::1], int32[::1], int64, uint8[::1], uint8[::1])",
    compact_marks_kernel: "void(uint8[::1], int64[::1], int64[::1])",
    piece_starts_kernel: "void(uint8[::1], int64[::1], int64[::1], int64, uint8[::1], "
                         "uint8[::1])",
    count_insert_kernel: "void(uint8[::1], int64[::1], int64[::1], uint8[::1], uint64[::1], "
                         "int64[::1], int64[::1], int64[::1])",
    long_word_check_kernel: "void(uint8[::1], int64[::1], int64[::1], uint8[::1], uint64[::1], "
                            "int64[::1], int64[::1])",
    gather_words_kernel: "void(uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
                         "int64[::1], int64[::1], int64[::1], int64[::1])",
}
