"""CUDA target of the encoding stages."""

from __future__ import annotations

import numpy as np
from numba import cuda, njit

from .._cuda import device_empty, device_function, exclusive_scan, launch
from ._shared import RuleTable
from .batch_cuda import BATCH_CUDA_SIGNATURES, interleaved_find_on_device, word_key_on_device
from .bpe import merge_by_scan

# ---------------------------------------------------------------- CUDA target
#
# The device encodes the distinct new words the host found (steps 1-2 and 4
# are byte scans and lookups in the host's word cache and stay there). Words
# travel packed end to end: word w is ``word_bytes[word_start[w]:word_start[w
# + 1]]``; the per-byte scratch (symbols, pair ranks) shares those offsets, so
# a thread never touches another word's entries. ``gpubpe.device`` decides
# which words go, in chunks sized by free device memory.

# Device bytes per word byte (packed bytes 1, symbols 4, pair ranks 8, output
# ids 4) and per word (start, order, lengths, symbol count, output length and
# offset: 8 each, plus the sort's scratch).
ENCODE_DEVICE_BYTES_PER_BYTE = 17
ENCODE_DEVICE_BYTES_PER_WORD = 64


@njit(cache=True, nogil=True)
def pack_words_cpu(data, word_at, word_len):
    """Words ``data[word_at[w]:word_at[w] + word_len[w]]`` end to end: (bytes, int64 starts)."""
    word_start = np.zeros(word_at.size + 1, np.int64)
    for w in range(word_at.size):
        word_start[w + 1] = word_start[w] + word_len[w]
    packed = np.empty(word_start[word_at.size], np.uint8)
    for w in range(word_at.size):
        packed[word_start[w]:word_start[w + 1]] = data[word_at[w]:word_at[w] + word_len[w]]
    return packed, word_start


_merge_by_scan_on_device = device_function(merge_by_scan)


@cuda.jit
def encode_words_kernel(word_bytes, word_start, order, rule_keys, rule_ranks, rule_result,
                        whole_table, token_pool, token_offsets, demolish_offsets, symbols,
                        pair_rank, n_symbols):
    """n_symbols[w] = ids left in word w after BPE, packed at symbols[word_start[w]:].

    Launch: one thread per word, grid-stride over ``order`` (the words by length,
    so the threads of a warp do about the same work). Scratch: ``symbols``
    (int32) and ``pair_rank`` (int64), one entry per byte. The merge order is
    ``merge_by_scan``'s, the CPU's: lowest rank first, leftmost at equal rank. A
    word that is a whole token (``whole_table`` not empty: tiktoken, HF
    ignore_merges) becomes that token first, as ``encode_word_list_cpu`` does. A byte
    with no token (no output in ``demolish_offsets``) is left out before merging, as
    ``bpe.word_symbols`` leaves it out.
    """
    drops = demolish_offsets.size > 0
    for k in range(cuda.grid(1), order.size, cuda.gridsize(1)):
        w = order[k]
        start = word_start[w]
        n = word_start[w + 1] - start
        kept = start
        for i in range(start, start + n):
            byte = np.int64(word_bytes[i])  # as uint8, the simulator's byte + 1 wraps at 255
            symbols[kept] = byte
            kept += not drops or demolish_offsets[byte + 1] > demolish_offsets[byte]
        token = -1
        if whole_table.size > 0 and n >= 2:
            token = interleaved_find_on_device(word_bytes, start, n,
                                               np.uint64(word_key_on_device(word_bytes,
                                                                            start, start + n)),
                                               whole_table, token_pool, token_offsets)
        if token >= 0:
            symbols[start] = token
            n_symbols[w] = 1
        else:
            n_symbols[w] = _merge_by_scan_on_device(symbols, pair_rank, start, kept - start,
                                                    rule_keys, rule_ranks, rule_result)


@cuda.jit
def output_lengths_kernel(symbols, word_start, n_symbols, demolish_offsets, out_len):
    """out_len[w] = output ids of word w: its symbols, or their demolished parts (Scaffold).

    Launch: one thread per word, grid-stride. No scratch.
    """
    for w in range(cuda.grid(1), n_symbols.size, cuda.gridsize(1)):
        count = n_symbols[w]
        if demolish_offsets.size > 0:
            count = 0
            for i in range(word_start[w], word_start[w] + n_symbols[w]):
                token = symbols[i]
                count += demolish_offsets[token + 1] - demolish_offsets[token]
        out_len[w] = count


@cuda.jit
def write_output_kernel(symbols, word_start, n_symbols, demolish_ids, demolish_offsets,
                        out_start, out):
    """Write word w's output ids at out[out_start[w]:]. Launch: one thread per word, grid-stride."""
    for w in range(cuda.grid(1), n_symbols.size, cuda.gridsize(1)):
        at = out_start[w]
        for i in range(word_start[w], word_start[w] + n_symbols[w]):
            token = symbols[i]
            if demolish_offsets.size == 0:
                out[at] = token
                at += 1
            else:
                for j in range(demolish_offsets[token], demolish_offsets[token + 1]):
                    out[at] = demolish_ids[j]
                    at += 1


@cuda.jit
def copy_token_bytes_kernel(ids, table_bytes, table_offsets, positions, out):
    """Write the bytes of ids[k] at out[positions[k]:]. Launch: one thread per id, grid-stride."""
    for k in range(cuda.grid(1), ids.size, cuda.gridsize(1)):
        token = ids[k]
        at = positions[k]
        for j in range(table_offsets[token], table_offsets[token + 1]):
            out[at] = table_bytes[j]
            at += 1


def encode_word_list_cuda(word_bytes, word_start, rules: RuleTable, xp):
    """BPE on packed device words: device ``(ids uint32, offsets int64)``, no host read.

    ``rules`` holds device arrays. ``ids`` is allocated for the worst case (one id
    per byte: every output token holds a byte or more); ``offsets[-1]`` says how
    many are written. Device scratch: ENCODE_DEVICE_BYTES_PER_BYTE and _PER_WORD.
    """
    n_words = word_start.size - 1
    order = xp.argsort(xp.diff(word_start))
    symbols = device_empty(xp, word_bytes.size, xp.int32)
    pair_rank = device_empty(xp, word_bytes.size, xp.int64)
    n_symbols = device_empty(xp, n_words, xp.int64)
    launch(encode_words_kernel, n_words, word_bytes, word_start, order, rules.keys, rules.ranks,
           rules.result, rules.whole_table, rules.token_pool, rules.token_offsets,
           rules.demolish_offsets, symbols, pair_rank, n_symbols)
    out_len = device_empty(xp, n_words, xp.int64)
    launch(output_lengths_kernel, n_words, symbols, word_start, n_symbols,
           rules.demolish_offsets, out_len)
    offsets = exclusive_scan(xp, out_len)
    ids = device_empty(xp, word_bytes.size, xp.uint32)
    launch(write_output_kernel, n_words, symbols, word_start, n_symbols, rules.demolish_ids,
           rules.demolish_offsets, offsets, ids)
    return ids, offsets


# Every @cuda.jit kernel of this module with the signature it is launched with; the
# PTX test compiles each for sm_80 and sm_90 without a device.
ENCODE_CUDA_SIGNATURES = {
    encode_words_kernel: "void(uint8[::1], int64[::1], int64[::1], uint64[::1], int64[::1], "
                         "int64[::1], uint64[::1], uint8[::1], int64[::1], int64[::1], "
                         "int32[::1], int64[::1], int64[::1])",
    output_lengths_kernel: "void(int32[::1], int64[::1], int64[::1], int64[::1], int64[::1])",
    write_output_kernel: "void(int32[::1], int64[::1], int64[::1], uint32[::1], int64[::1], "
                         "int64[::1], uint32[::1])",
    copy_token_bytes_kernel: "void(int64[::1], uint8[::1], int64[::1], int64[::1], uint8[::1])",
    **BATCH_CUDA_SIGNATURES,
}
