"""Batched BPE encoding, in stages: pieces, word refs, unique-word BPE, ragged ids, decoding.

Modules, one per stage: ``pieces`` (special tokens, documents cut into pieces),
``words`` (word keys, refs, new words), ``bpe`` (one word; a list of words),
``scatter`` (ids per piece, written in place), ``cache`` (the word cache),
``decode`` (ids to bytes), ``texts`` (ids to Python str objects, written in place),
``rules`` (rule tables), ``cuda`` (the CUDA target:
word lists, decoding), ``batch_cuda`` (the CUDA target of a whole batch: items
from word-start flags, dedupe, the device word cache, scatter; its docstring
lists the steps).

A batch is UTF-8 bytes cut into *pieces*: runs of ordinary text, or one
special token each (``piece_special`` >= 0 holds its id). Pieces are handed
to threads in contiguous runs (*shards*); every step below is exact, so the
ids never depend on how many shards there are or where they start.

1. ``word_refs_scan_cpu`` / ``word_refs_given_cpu`` (one call per shard, no
   GIL): split the pieces into words and look each word up, by its
   ``word_key``, in the tokenizer's ``WordCache``; a miss goes into the
   shard's own table of new words. Each word occurrence becomes a *ref*: a
   cache slot (>= 0) or ``-1 - index`` of a new word.
2. ``word_parts``, ``new_words_of_part`` (one call per part of the words, by
   key, no GIL) and ``global_word_slots``: the shards' new words, deduplicated across shards,
   in order of first occurrence in the batch.
3. ``encode_word_list_cpu`` (split over threads): BPE on each distinct new
   word (``bpe_word``), then the Scaffold demolish map when the vocabulary
   has one.
4. ``count_piece_tokens_cpu`` then ``write_piece_tokens_cpu`` (per shard):
   the id count of each piece, a prefix sum (host), and the ids written in
   place into one ``uint32`` array.
5. ``cache_admit_cpu``: the batch's new words enter the cache while it has
   room (the caller decides eviction); on many threads, when all fit,
   ``admission_slots`` then ``cache_admit_part`` in parts, among step 4's writes.

``encode_pieces_serial_cpu`` runs steps 1-4 in one call for small batches, and
``encode_short_text_cpu`` splits and merges one short text without the cache.

On a GPU (``backend="cuda"``), steps 1-5 run on the device for the whole batch
(``batch_cuda``; step 3 as ``encode_word_list_cuda``, a thread per word, the same
``merge_by_scan``), and decoding device ids as ``copy_token_bytes_kernel``
(``Device.gather_device_bytes``); ``gpubpe.device`` feeds them chunks.

One word of up to 255 bytes is encoded by ``bpe_scan_word``: the rule of
each live adjacent pair sits at its left position (linked list, no id moves),
and each merge takes the branch-free SIMD minimum of (rank, position) over the
word: the smallest rank wins, the leftmost at equal rank. Longer words use the
priority-queue + linked-list algorithm of ``shared/seeds/002_*``
(``bpe_heap_word``): a min-heap of int64 keys rank << 32 | position, the rule of
each live pair kept at its left position; a popped key is stale when its
position died or the pair there changed rank. O(n log n) per word: a 64 KB word
of letters ~5 ms, ~1.2x tiktoken's speed on such words. Rules are looked up in hash tables keyed
by the pair: ``pair_cells`` (key, rank and result side by side) behind 64-bit
per-id pair signatures on the CPU; keys -> rank and rank -> result on a GPU.

Performance notes (thread CPU time on the 2-core build VM, 10 MB of English,
32K vocabulary; bench/encode_bench.py has the end-to-end numbers):

- The split dominates: ~7 ns/byte for the GPT-2 scanner, mostly mispredicted
  branches at word ends. Handling ASCII word starts inline
  (``gpt2_word_end_fast``) gave +35%. cl100k and o200k scan through the same
  kernel (``pretok.piece_end``, one branch per word on the scanner id).
- Cache lookups first cost ~45 ns per word: separate key and slot arrays,
  then two offset arrays and the pooled bytes to compare, 4-5 dependent
  loads. Words of up to 7 bytes are now their own key (no byte compare) and
  each cell holds (key, slot) side by side: ~13 ns per word.
- A NamedTuple of arrays passed to a helper that is really called costs
  seven machine words per array; the per-word helpers are inlined at Numba IR
  level (``inlined``): word refs 233 -> 163 ms per 10 MB with an empty cache.
  Compile time was the same without it (the scanner kernel takes ~10 s to
  compile once; it is cached on disk).
- In a kernel that uses the Numba runtime, picking one of two arrays inside
  the per-word loop (``a if c else b``) adds refcount traffic per word: the
  write step went from 25 to 172 ms; count and write now run without it.
- BPE of a distinct word: ~1 us for a 7-byte English word with the heap,
  ~0.5 us with the heap-free scan. It matters little: 40 MB of English hold
  ~160K distinct words for ~9M occurrences, and the cache keeps them.
- Python threads over ``nogil`` kernels, not ``parallel=True``: the
  workqueue threading layer aborts when two Python threads launch parallel
  kernels at once, and the thread count is then the caller's to choose.
- Tried and dropped: gathering Python int objects from an object array to
  build ``list[list[int]]`` faster than ``ndarray.tolist`` (no gain).

Notes on long distinct words (CJK; issue 14). cl100k's pattern makes a run of
Han or kana one word: the zh/ja test documents hold ~6-8K distinct words of
18-29 bytes on average, ~60% of the bytes in words over 32 bytes, and BPE of
them was ~75% of a cold call. ``perf record -e cpu-clock`` with the JIT
addresses mapped back to Numba functions (ja word list, cl100k, before):
heap 54%, short-word scan 23%, whole-token lookup 10%, output map 7%.
Numbers below are thread CPU time of ``encode_word_list_cpu`` on those words,
medians of interleaved runs on the shared 2-core VM (noisy: +-10%).

- Re-encoding each word right after itself cost ~1/5 of the first pass, so
  the time was stalls, not work: every merge waits on loads whose address
  depends on the previous merge (result id -> pair cell) and on the
  mispredicted branches of the minimum search.
- Tried: 8-byte cells (42-bit key and rank in one word, a 4-8 MB table instead
  of 16 MB): no gain beyond noise. A per-call direct-mapped cache of recent
  lookups (2^13-2^17 cells) in front of the table: no gain.
- Kept: ``bpe_scan_word`` for words up to 255 bytes (was: shifting scan up to
  32, heap above): no id moves, the minimum is vector code. 0-20% alone
  (within the noise on zh, clearer on English and ja).
- Kept: pair signatures. ~70% of the lookups made after a merge find no rule
  (ja: 150,525 of 213,063) and they are the cache misses; a 64-bit signature
  per id and side rejects 99.8% of them from words that stay in cache. Against
  the same scan over ``pair_cells`` without them: zh 16.5 -> 9.5 ms, ja 13.6
  -> 9.1 ms (medians, interleaved); English unchanged.
- Kept: int32 (rank << 8 | position) scan keys, 16 lanes a step: -5%.
- Kept: the whole-token shape filter: ja 45% of words, 73% of word bytes, are
  no token's (length, first byte) and skip the hash and the probe.
- Kept: one output id per internal id as a flat table (imports): one load per
  emitted token instead of three (not timed apart).
- All of the above, old and new trees in alternating processes (2 runs each,
  load average ~8): cl100k zh 13.9-17.0 -> 6.6-7.4 ms, ja 15.4-16.7 -> 8.0-8.1,
  English 16.8-18.8 -> 11.1-12.4; o200k's pattern zh 17.4-18.9 -> 7.0-7.4, ja
  16.9-19.1 -> 7.4, English 16.0-18.7 -> 10.2-13.0.
- Tried for two threads: more word-list shares than threads, taken as threads
  free up (with the thread count held): no gain, the two halves already cost
  the same (3.1 / 3.2 ms, ja) and together take 3.9 ms, the threads slowing
  each other in the shared L3. The tables (pair cells, signatures, whole-token
  and word-cache tables) on 2 MB pages (THP madvise): -22% in one in-process
  test (ja, 2 threads, 7.8 -> 6.1 ms), nothing in alternating-process runs
  against tiktoken; dropped.
- Where a cold 1-thread zh call (cl100k) goes now, perf samples: the scan
  41%, the word-list loop (whole-token lookup, copies) 10%, cache admission
  10%, output ids 8% (before the flat table), word refs and splitting 8%, the
  rest Python and NumPy around the kernels (str -> UTF-8 bytes, argsort of the
  new words by count, the word-cache clear the bench does per call).

Notes on two threads (issue 14, helper cjk2; ja, cl100k, each call right after
a tiktoken call, medians, idle 2-core VM):

- The two word-list shares often ran one after the other: timed per share,
  one pool thread used 3.4 ms of CPU in 7 ms of wall time, or started only
  when the other had finished (the second worker woken on the first one's
  core, the other core idle). The calling thread now runs the first share of
  every step itself and the pool only the rest (``_run_all``): the BPE step
  7.2 -> 4.3 ms, the whole call 10.9 -> 8.8 ms.
- Admission (``cache_admit_cpu``, ~1 ms cold: a memory round trip per insert
  into the 4 MB table) runs on a pool thread while the calling thread writes
  the ids (both shards, one after the other: 0.4 ms; on two threads beside
  admission they took 1.4 ms, three threads on two cores). The ids read only
  cache slots older than the call, which admission never changes; the cache
  lock is held throughout and emptying a full cache waits for the ids, so the
  cache ends as the serial admission leaves it. The call 8.8 -> 6.6 ms.
- Tried: a pass of independent loads of the words' first table cells before
  the inserts (to overlap the misses): no gain after a 64 MB sweep (1.05 ms
  either way), +0.14 ms warm; dropped. Admitting in first-seen order when
  all fit (no sort; bytes and ids read front to back): 0.05 ms, kept.
"""

from __future__ import annotations

from ._shared import (
    NewWords,
    RuleTable,
    WordCache,
)
from .bpe import (
    bpe_heap_word,
    bpe_short_word,
    bpe_word,
    encode_word_list_cpu,
    interleaved_word_lists,
    join_word_lists,
    merge_by_scan,
)
from .cache import (
    ADMIT_IN_PARTS_FROM,
    admission_slots,
    cache_admit_cpu,
    cache_admit_part,
    cache_has_room,
    clear_word_cache,
    empty_word_cache,
)
from .cuda import (
    ENCODE_CUDA_SIGNATURES,
    ENCODE_DEVICE_BYTES_PER_BYTE,
    ENCODE_DEVICE_BYTES_PER_WORD,
    encode_word_list_cuda,
    pack_words_cpu,
)
from .decode import (
    byte_slots,
    first_bad_id,
    gather_token_bytes_cpu,
)
from .pieces import (
    PREFIX_ALWAYS,
    PREFIX_FIRST,
    PREFIX_MARKED,
    PREFIX_NONE,
    PREFIX_UNLESS_SPACE,
    build_pieces_cpu,
    find_specials_cpu,
    source_piece_lengths,
    write_source_pieces,
)
from .rules import (
    rule_table,
    whole_token,
    whole_tokens_of_words_cpu,
)
from .scatter import (
    count_piece_tokens_cpu,
    encode_pieces_serial_cpu,
    encode_short_text_cpu,
    framed,
    write_piece_tokens_cpu,
)
from .words import (
    global_word_slots,
    new_words_of_part,
    word_key,
    word_parts,
    word_refs_given_cpu,
    word_refs_scan_cpu,
)

__all__ = ["ADMIT_IN_PARTS_FROM", "PREFIX_ALWAYS", "PREFIX_FIRST", "PREFIX_MARKED", "PREFIX_NONE", "PREFIX_UNLESS_SPACE", "ENCODE_CUDA_SIGNATURES", "ENCODE_DEVICE_BYTES_PER_BYTE", "ENCODE_DEVICE_BYTES_PER_WORD", "NewWords", "RuleTable", "WordCache", "admission_slots", "bpe_heap_word", "bpe_short_word", "bpe_word", "build_pieces_cpu", "byte_slots", "cache_admit_cpu", "cache_admit_part", "cache_has_room", "clear_word_cache", "count_piece_tokens_cpu", "empty_word_cache", "encode_pieces_serial_cpu", "encode_short_text_cpu", "encode_word_list_cpu", "encode_word_list_cuda", "find_specials_cpu", "first_bad_id", "framed", "gather_token_bytes_cpu", "global_word_slots", "interleaved_word_lists", "join_word_lists", "merge_by_scan", "new_words_of_part", "pack_words_cpu", "rule_table", "source_piece_lengths", "whole_token", "whole_tokens_of_words_cpu", "word_key", "word_parts", "word_refs_given_cpu", "word_refs_scan_cpu", "write_piece_tokens_cpu", "write_source_pieces"]
