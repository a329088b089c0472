"""BPE training controller: argument checks, word counting, the merge loop in batches.

The heavy work is in ``gpubpe.kernels``: ``build_pair_index_cpu`` counts every
pair once, then ``merge_loop_cpu`` runs the BPE iterations (priority queue with
lazy invalidation, merge application, count deltas) in Numba, a batch of rules
per call so a progress bar can move. Results do not depend on thread counts:
word counting is a sum, and the merge loop is sequential and exact.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable

import numpy as np
from tqdm.auto import tqdm

from .backend import Backend, resolve_backend
from .bytes_order import HF_BYTE_RANK as _HF_BYTE_RANK
from .errors import ConfigError, CorpusError
from .kernels._cuda import to_host
from .kernels.hashing import empty_table, hash_bytes, table_grown, table_put
from .kernels.merge import (
    STOP_MIN_FREQUENCY,
    STOP_NO_PAIR,
    STOP_VOCAB,
    append_token,
    apply_pair_deltas,
    mark_scaffold_children,
    merge_batch_cpu,
    merge_step_cuda,
    settle_head,
    token_for_merge,
)
from .kernels.pairs import (
    HEAP_SIZE,
    N_NORMAL,
    N_POSTINGS,
    N_SLOTS,
    N_TOKENS,
    NEED,
    POOL_USED,
    SIZES_LENGTH,
    STOP,
    build_pair_index_cpu,
    count_pairs_cuda,
    index_pair_counts,
    token_frequencies_cpu,
)
from .kernels.pqueue import empty_heap, heap_of_counts, heap_pop
from .model import Vocabulary, check_special_tokens
from .pretokenize import check_num_threads, count_words, resolve_pattern

TIE_BREAKS = ("hf",)
# Rules per call of the Numba loop: small enough for a lively progress bar,
# large enough that the call overhead (~50 us) does not show.
_RULES_PER_CALL = 512
HF_BYTE_RANK = np.array(_HF_BYTE_RANK, dtype=np.int64)


# Token ids are uint32 (DESIGN §2), special tokens included.
MAX_VOCAB_SIZE = (1 << 32) - 1


def check_train_args(vocab_size, min_frequency, tie_break) -> None:
    """Raise ConfigError for arguments training cannot use."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise ConfigError(f"vocab_size must be an int, not {type(vocab_size).__name__}")
    if vocab_size < 256:
        raise ConfigError(
            f"vocab_size={vocab_size} is below 256: the 256 byte tokens are always part of "
            "the vocabulary; ask for at least 257 to learn any merge"
        )
    if vocab_size > MAX_VOCAB_SIZE:
        raise ConfigError(f"vocab_size={vocab_size} is beyond the id space: token ids are "
                          f"uint32, so at most {MAX_VOCAB_SIZE:,}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int | np.integer):
        raise ConfigError(f"min_frequency must be an int, not {type(min_frequency).__name__}")
    if min_frequency < 0:
        raise ConfigError(f"min_frequency={min_frequency} is negative; use 0 for no threshold")
    if tie_break not in TIE_BREAKS:
        raise ConfigError(f"tie_break={tie_break!r} is not one of {TIE_BREAKS}")


def flatten_words(word_counts: dict[bytes, int]):
    """The word table of DESIGN §2: tokens (uint32), word_start, word_len, word_count (int64)."""
    words = list(word_counts)
    word_len = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    word_start = np.zeros(len(words), dtype=np.int64)
    if len(words) > 1:
        np.cumsum(word_len[:-1], out=word_start[1:])
    tokens = np.frombuffer(b"".join(words), dtype=np.uint8).astype(np.uint32)
    word_count = np.fromiter(word_counts.values(), dtype=np.int64, count=len(words))
    return tokens, word_start, word_len, word_count


def train_from_counts(
    word_counts: dict[bytes, int],
    vocab_size: int,
    *,
    min_frequency: int = 0,
    scaffold: bool = False,
    progress: bool = True,
    backend: Backend | None = None,
):
    """Rules learned from word counts: int64 (n x 3) rows ``(left, right, result)``.

    With ``scaffold=True`` (Scaffold-BPE) returns ``(rules, scaffold_flags)``,
    the flags a bool per internal id. ``backend`` (from ``resolve_backend``)
    picks the CPU loop or the CUDA kernels; both give the same rules.
    """
    if backend is not None and backend.name == "cuda":
        state = _CudaTrainState(word_counts, vocab_size, backend.xp)
    else:
        state = _CpuTrainState(word_counts, vocab_size)
    bar = tqdm(total=vocab_size - 256, desc="merges", unit="tok", disable=not progress, leave=False)
    batches = []
    with bar:
        while True:
            normal_before = int(state.sizes[N_NORMAL])
            rules, stop = state.run(_RULES_PER_CALL, vocab_size, max(min_frequency, 1), scaffold)
            batches.append(rules)
            bar.update(int(state.sizes[N_NORMAL]) - normal_before)
            if stop:
                break
    rules = np.concatenate(batches)
    if not scaffold:
        return rules
    return rules, state.arrays["scaffold"][: state.sizes[N_TOKENS]].astype(bool)


class _TrainState:
    """Host state of training: pair slots and their table, the heap, the tokens made."""

    sizes: np.ndarray
    arrays: dict

    def _init_heap(self, n_slots: int) -> None:
        priority, order, item = empty_heap(2 * n_slots)
        self.sizes[HEAP_SIZE] = heap_of_counts(priority, order, item, self.arrays["slot_count"],
                                               self.arrays["slot_order"], n_slots)
        self.arrays.update(heap_priority=priority, heap_order=order, heap_item=item)


    def _init_tokens(self, vocab_size: int, word_table) -> None:
        # Sized by what the corpus can produce, never by the request: each merge
        # shortens some word, so merges <= sum(word_len - 1) (vocab_size=10**9 is fine).
        capacity = max(min(vocab_size, 256 + int(np.maximum(word_table[2] - 1, 0).sum())), 512)
        pool = np.zeros(16 * capacity, np.uint8)
        pool[:256] = np.arange(256)
        token_start = np.zeros(capacity, np.int64)
        token_start[:256] = np.arange(256)
        token_len = np.zeros(capacity, np.int64)
        token_len[:256] = 1
        token_hash = np.zeros(capacity, np.uint64)
        vocab_keys, vocab_values = empty_table(4 * capacity)
        for byte in range(256):
            token_hash[byte] = hash_bytes(pool, byte, 1)
            table_put(vocab_keys, vocab_values, token_hash[byte], byte)
        self.sizes[N_TOKENS], self.sizes[POOL_USED], self.sizes[N_NORMAL] = 256, 256, 256
        token_freq = token_frequencies_cpu(*word_table, capacity)
        self.arrays.update(pool=pool, token_start=token_start, token_len=token_len,
                           token_hash=token_hash, vocab_keys=vocab_keys,
                           vocab_values=vocab_values, token_freq=token_freq,
                           scaffold=np.zeros(capacity, np.uint8))

    _STATE = ("table_keys", "table_values", "slot_key", "slot_count", "slot_order", "slot_head",
              "slot_touch", "post_word", "post_next", "touched", "heap_priority", "heap_order",
              "heap_item", "pool", "token_start", "token_len", "token_hash", "vocab_keys",
              "vocab_values", "token_freq", "scaffold")

    def _grow(self, need: int) -> None:
        """Make room for one merge that may add ``need`` slots, postings and pushes."""
        a, sizes = self.arrays, self.sizes
        while 2 * (sizes[N_SLOTS] + need) > a["table_keys"].size:
            a["table_keys"], a["table_values"] = table_grown(a["table_keys"], a["table_values"])
        while 2 * (sizes[N_TOKENS] + 1) > a["vocab_keys"].size:
            a["vocab_keys"], a["vocab_values"] = table_grown(a["vocab_keys"], a["vocab_values"])
        groups = (
            (("slot_key", "slot_count", "slot_order", "slot_head", "slot_touch"), sizes[N_SLOTS] + need),
            (("post_word", "post_next"), sizes[N_POSTINGS] + need),
            (("touched",), need),
            (("heap_priority", "heap_order", "heap_item"), sizes[HEAP_SIZE] + need + 1),
            (("token_start", "token_len", "token_hash", "token_freq", "scaffold"),
             sizes[N_TOKENS] + 1),
            (("pool",), sizes[POOL_USED] + need),
        )
        for names, wanted in groups:
            for name in names:
                if a[name].size < wanted:
                    a[name] = _grown(a[name], int(wanted))


class _CpuTrainState(_TrainState):
    """Every array the Numba merge loop keeps between calls."""

    def __init__(self, word_counts: dict[bytes, int], vocab_size: int):
        self.tokens, self.word_start, self.word_len, self.word_count = flatten_words(word_counts)
        index, n_slots, n_postings = build_pair_index_cpu(
            self.tokens, self.word_start, self.word_len, self.word_count, HF_BYTE_RANK
        )
        self.arrays = index
        self.arrays["touched"] = np.zeros(1024, np.int64)
        self.word_stamp = np.full(len(word_counts), -1, np.int64)
        self.sizes = np.zeros(SIZES_LENGTH, np.int64)
        self.sizes[N_SLOTS], self.sizes[N_POSTINGS] = n_slots, n_postings
        self._init_heap(n_slots)
        self._init_tokens(vocab_size, (self.tokens, self.word_start, self.word_len, self.word_count))

    def run(self, max_rules: int, vocab_size: int, min_count: int, scaffold: bool):
        """Up to max_rules rules; returns (rules, stopped)."""
        rules = np.zeros((max_rules, 3), np.int64)
        done = 0
        while done < max_rules:
            done += merge_batch_cpu(
                rules[done:], vocab_size, min_count, scaffold, self.sizes, HF_BYTE_RANK,
                self.tokens, self.word_start, self.word_len, self.word_count, self.word_stamp,
                *(self.arrays[name] for name in self._STATE),
            )
            if self.sizes[NEED] == 0:
                break
            self._grow(int(self.sizes[NEED]))
        return rules[:done], bool(self.sizes[STOP])


class _CudaTrainState(_TrainState):
    """GPU training: word positions on the device, the controller on the host.

    Per iteration the host picks the head of its queue; the device applies
    the merge over every position (``merge_step_cuda``) and sends back the
    summed pair-count deltas in one copy, the iteration's only sync; the host
    then updates its queue and scaffold state with the same Numba helpers as
    the CPU loop, so both backends take the same decisions.
    """

    def __init__(self, word_counts: dict[bytes, int], vocab_size: int, xp):
        word_table = flatten_words(word_counts)
        tokens, word_start, word_len, word_count = word_table
        last_in_word = np.zeros(tokens.size, np.uint8)
        last_in_word[word_start + word_len - 1] = 1
        self.xp = xp
        self.positions = {"tokens": xp.asarray(tokens), "last_in_word": xp.asarray(last_in_word),
                          "position_count": xp.asarray(np.repeat(word_count, word_len))}
        keys, counts = count_pairs_cuda(*self.positions.values(), xp=xp)
        keys, counts = to_host(keys, "initial pair keys"), to_host(counts, "initial pair counts")
        capacity = max(2 * keys.size, 1024)
        table_keys, table_values = empty_table(2 * capacity)
        self.arrays = {"table_keys": table_keys, "table_values": table_values,
                       "slot_key": np.zeros(capacity, np.uint64),
                       "slot_count": np.zeros(capacity, np.int64),
                       "slot_order": np.zeros(capacity, np.uint64),
                       "slot_head": np.full(capacity, -1, np.int64),
                       "slot_touch": np.full(capacity, -1, np.int64),
                       "post_word": np.zeros(16, np.int64), "post_next": np.zeros(16, np.int64),
                       "touched": np.zeros(16, np.int64)}
        a = self.arrays
        index_pair_counts(keys, counts, HF_BYTE_RANK, table_keys, table_values, a["slot_key"],
                          a["slot_count"], a["slot_order"], a["slot_head"])
        self.sizes = np.zeros(SIZES_LENGTH, np.int64)
        self.sizes[N_SLOTS] = keys.size
        self._init_heap(int(keys.size))
        self._init_tokens(vocab_size, word_table)

    def run(self, max_rules: int, vocab_size: int, min_count: int, scaffold: bool):
        """Up to max_rules rules, one device merge step each; returns (rules, stopped)."""
        rules: list[tuple[int, int, int]] = []
        while len(rules) < max_rules and not self.sizes[STOP]:
            rule = self._iterate(vocab_size, min_count, scaffold)
            if rule is not None:
                rules.append(rule)
        return np.array(rules, dtype=np.int64).reshape(-1, 3), bool(self.sizes[STOP])

    def _iterate(self, vocab_size: int, min_count: int, scaffold: bool):
        """One Scaffold-BPE/BPE iteration; the rule it applied, or None."""
        a, sizes = self.arrays, self.sizes
        heap = (a["heap_priority"], a["heap_order"], a["heap_item"])
        if sizes[N_NORMAL] >= vocab_size:
            sizes[STOP] = STOP_VOCAB
            return None
        priority = settle_head(*heap, sizes, a["slot_count"], a["slot_order"], a["token_freq"],
                               a["scaffold"])
        if sizes[HEAP_SIZE] == 0 or priority < min_count:
            sizes[STOP] = STOP_NO_PAIR if sizes[HEAP_SIZE] == 0 else STOP_MIN_FREQUENCY
            return None
        best = int(a["heap_item"][0])
        if best < 0:  # a scaffold token at the head is re-admitted
            sizes[HEAP_SIZE] = heap_pop(*heap, sizes[HEAP_SIZE])
            a["scaffold"][-best - 1] = 0
            sizes[N_NORMAL] += 1
            return None
        key = int(a["slot_key"][best])
        left, right = key >> 32, key & 0xFFFFFFFF
        self._grow(int(a["token_len"][left] + a["token_len"][right]) + 3)
        token_arrays = (a["pool"], a["token_start"], a["token_len"], a["token_hash"],
                        a["vocab_keys"], a["vocab_values"])
        merged, merged_hash = token_for_merge(left, right, sizes, *token_arrays)
        if merged >= 0 and a["scaffold"][merged]:
            a["scaffold"][merged] = 0  # re-admitted; the pair stays at the head
            sizes[N_NORMAL] += 1
            return None
        sizes[HEAP_SIZE] = heap_pop(*heap, sizes[HEAP_SIZE])
        if merged < 0:
            merged = append_token(left, right, np.uint64(merged_hash), sizes, *token_arrays)
            a["token_freq"][merged] = 0
            a["scaffold"][merged] = 0
            sizes[N_NORMAL] += 1
        self._apply_on_device(best, left, right, int(merged), scaffold)
        return left, right, int(merged)

    def _apply_on_device(self, best: int, left: int, right: int, merged: int, scaffold: bool):
        a, sizes = self.arrays, self.sizes
        summary = merge_step_cuda(self.xp, self.positions, left, right, merged)
        merged_count, n_keys = int(summary[0]), int(summary[1])
        keys = summary[2:2 + n_keys].view(np.uint64)
        self._grow(n_keys + 3)
        heap = (a["heap_priority"], a["heap_order"], a["heap_item"])
        apply_pair_deltas(keys, summary[2 + n_keys:], sizes, HF_BYTE_RANK, a["table_keys"],
                          a["table_values"], a["slot_key"], a["slot_count"], a["slot_order"],
                          a["slot_head"], a["slot_touch"], *heap)
        a["slot_count"][best] = 0
        a["token_freq"][merged] += merged_count
        a["token_freq"][left] -= merged_count
        a["token_freq"][right] -= merged_count
        if scaffold:
            mark_scaffold_children(left, right, sizes, *heap, a["slot_count"], a["slot_order"],
                                   a["token_freq"], a["scaffold"])


def _grown(array: np.ndarray, wanted: int) -> np.ndarray:
    bigger = np.zeros(max(2 * array.size, wanted), dtype=array.dtype)
    bigger[: array.size] = array
    return bigger


def train(
    corpus=None,
    vocab_size: int | None = None,
    *,
    counts=None,
    extend=None,
    add: int | None = None,
    min_frequency: int = 0,
    pattern: str | None = "gpt2",
    special_tokens: Iterable[str] = (),
    tie_break: str = "hf",
    scaffold: bool = False,
    backend: str = "auto",
    progress: bool = True,
    text_field: str = "text",
    num_threads: int | None = None,
):
    """Train a byte-level BPE tokenizer and return it as a :class:`~gpubpe.Tokenizer`.

    ``corpus`` is a path, a list of paths (``.txt``: each line a document;
    ``.jsonl``: the ``text_field`` of each line), or any iterable of ``str`` /
    ``bytes`` documents. ``vocab_size`` counts the 256 byte tokens and excludes
    special tokens. Ties between equally frequent pairs are broken as HF
    ``tokenizers`` does (``tie_break="hf"``), so the merges equal HF's.

    ``scaffold=True`` trains Scaffold-BPE (Lian et al.): tokens that become
    rare once merged into longer ones turn into scaffold tokens, used while
    encoding and then demolished, so ``vocab_size`` counts normal tokens only.

    ``counts`` (a :class:`~gpubpe.WordCounts` or a counts file) replaces the
    corpus: no corpus pass. ``extend`` (a Tokenizer or a tokenizer file) with
    ``add`` new tokens continues BPE from that vocabulary (``gpubpe.extend``).
    """
    from .tokenizer import Tokenizer

    if counts is not None or extend is not None:  # word counts from a file (gpubpe.counts)
        from .counts import train_on_counts

        return train_on_counts(
            counts, vocab_size, corpus=corpus, extend=extend, add=add,
            min_frequency=min_frequency, pattern=pattern, special_tokens=special_tokens,
            tie_break=tie_break, scaffold=scaffold, backend=backend, progress=progress)
    check_train_args(vocab_size, min_frequency, tie_break)
    if scaffold and vocab_size <= 256:
        raise ConfigError(
            f"scaffold=True needs vocab_size above 256 (got {vocab_size}): only merged tokens "
            "can become scaffold tokens")
    special_tokens = check_special_tokens(special_tokens)
    check_num_threads(num_threads)
    resolve_pattern(pattern)
    chosen = resolve_backend(backend)
    started = time.perf_counter()
    with tqdm(desc="counting words", unit="B", unit_scale=True, disable=not progress,
              leave=False) as bar:
        word_counts = count_words(corpus, pattern, special_tokens, text_field, num_threads, bar)
    counted = time.perf_counter()
    corpus_bytes = sum(len(word) * count for word, count in word_counts.items())
    if corpus_bytes == 0:
        raise CorpusError("the corpus holds no text to train on (empty, or only special tokens)")
    trained = train_from_counts(word_counts, int(vocab_size), min_frequency=int(min_frequency),
                                scaffold=scaffold, progress=progress, backend=chosen)
    rules, flags = trained if scaffold else (trained, None)
    vocab = Vocabulary.from_rules(rules, special_tokens, pattern, scaffold=flags)
    if vocab.vocab_size < vocab_size:
        warnings.warn(
            f"training stopped at {vocab.vocab_size} tokens, below vocab_size={vocab_size}: "
            "no pair left" + (" at min_frequency" if min_frequency > 1 else "")
            + "; use a larger corpus or a smaller vocab_size", stacklevel=2)
    vocab.metadata.update(
        corpus_bytes=int(corpus_bytes),
        unique_words=len(word_counts),
        seconds_counting=round(counted - started, 3),
        seconds_merging=round(time.perf_counter() - counted, 3),
        backend=chosen.name,
        min_frequency=int(min_frequency),
        tie_break=tie_break,
        scaffold=bool(scaffold),
    )
    return Tokenizer(vocab, backend)
