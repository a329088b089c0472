"""Types and decorators shared by the encoding stages."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

# Small helpers called once per word or per pair, inlined into their callers at
# Numba IR level: a real call passes every array of a NamedTuple by value
# (seven machine words each), which cost more than the work itself.
inlined = njit(cache=True, _nrt=False, inline="always")


class RuleTable(NamedTuple):
    """Merge rules for encoding, and the Scaffold demolish map (both empty for plain BPE)."""

    keys: np.ndarray  # uint64 hash table of pair keys
    ranks: np.ndarray  # int64: the rank stored under each key
    result: np.ndarray  # int64: rank -> id the rule produces
    demolish_ids: np.ndarray  # uint32: output ids of internal id t at demolish_offsets[t:t+2]
    demolish_offsets: np.ndarray  # int64, one more than internal ids; empty: output == internal
    # Whole-token lookup (tiktoken; HF ignore_merges), all empty when off: a word that
    # is a token maps to it before any merge. Interleaved (word_key, internal id)
    # cells; the tokens' bytes, to compare long words, at token_offsets[t:t+2].
    whole_table: np.ndarray  # uint64
    token_pool: np.ndarray  # uint8
    token_offsets: np.ndarray  # int64
    # 1 at [min(length, 255) * 256 + first byte] when some token has that shape: most
    # long words (CJK runs) are no token's shape, and skip the hash and the probe.
    whole_shapes: np.ndarray  # uint8, 65536 (empty when the lookup is off)
    # The CPU's pair lookup (``bpe.bpe_scan_word``): interleaved (pair key, rank << 32 |
    # result) cells, one cache line read per lookup and no second load for the result;
    # and two 64-bit pair signatures per internal id (as left, as right; see
    # ``rules.pair_signature_bit``), which answer most pairs that have no rule
    # without touching the table.
    pair_cells: np.ndarray  # uint64, 2 per cell
    pair_signatures: np.ndarray  # uint64, 2 per internal id
    # The output map when it gives exactly one id per internal id (an import's layout):
    # one load per emitted token instead of three; empty otherwise.
    output_ids: np.ndarray  # uint32, one per internal id


class WordCache(NamedTuple):
    """Encoded words kept across calls: word key -> slot, then each slot's bytes and ids."""

    table: np.ndarray  # uint64, 2 per cell: word key, slot (see ``word_key``)
    byte_offsets: np.ndarray  # int64, max_words + 1: slot s's bytes in pool_bytes
    id_offsets: np.ndarray  # int64, max_words + 1: slot s's ids in pool_ids
    pool_bytes: np.ndarray  # uint8
    pool_ids: np.ndarray  # uint32
    used: np.ndarray  # int64[1]: slots in use


class NewWords(NamedTuple):
    """A shard's words that missed the cache: a table and, per word, where it was seen."""

    table: np.ndarray  # uint64, 2 per cell: word key, index of the word
    at: np.ndarray  # int64: byte offset of its first occurrence in the batch
    length: np.ndarray  # int64: its length in bytes
    count: np.ndarray  # int64: occurrences in the shard
    key: np.ndarray  # uint64: its word key
