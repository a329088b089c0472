"""Extend a vocabulary: continue BPE from an existing tokenizer on new word counts.

The base's rules are applied to every counted word in rank order, exactly as
its training applied them (not by encoding: a rule pointing at an existing
token can make a pair of lower rank, which training had already passed), then
new rules are chosen as usual. Old tokens keep their ids; new tokens take ids
above every existing one. On the corpus a gpubpe vocabulary was trained on,
extending a size-N vocabulary by K equals training at N + K.

Ties between equal counts break by the base vocabulary's ids, through one
table, ``tie_rank`` (the rank of each byte token; merged tokens rank by id
after every byte). For gpubpe's layout that is the training tie order (bytes
by HF's rank), and it is also the id order of the imported layouts gpubpe
reads today: GPT-2's and HF-trained files number bytes in that same order and
merged tokens in creation order, tiktoken's ranks likewise.

What imported layouts still need: an import now keeps the source tool's ids
(``Vocabulary.layout``: byte tokens at other ids, gaps, tiktoken's whole-token
rule). Extending such a base would need the new tokens' output ids above its
highest id and its encoding rule carried into the merged vocabulary; until
that is built, :func:`_check_layout` refuses a base with a layout of its own,
and a base with special tokens. A file or encoding whose ids already are
gpubpe's (exported by gpubpe to HF) is extended today.
"""

from __future__ import annotations

import bisect
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

from .counts import WordCounts, check_pattern
from .errors import ConfigError, ModelFormatError
from .kernels.hashing import hash_bytes, table_find, table_put
from .kernels.pairs import (
    N_NORMAL,
    N_POSTINGS,
    N_SLOTS,
    N_TOKENS,
    POOL_USED,
    SIZES_LENGTH,
    build_pair_index_cpu,
)
from .trainer import HF_BYTE_RANK, _CpuTrainState, _grown

# Rules per call of the Numba loop, as in the trainer.
_RULES_PER_CALL = 512


def load_base(base):
    """The base as a :class:`~gpubpe.model.Vocabulary`: a Tokenizer, a gpubpe file, a HF
    ``tokenizer.json`` or a ``tiktoken.Encoding``; anything not byte-level BPE is refused,
    and so is an import with an id layout of its own (see :func:`_check_layout`)."""
    from . import interop
    from .model import Vocabulary
    from .tokenizer import Tokenizer

    if isinstance(base, Tokenizer):
        return base.vocabulary
    if isinstance(base, Vocabulary):
        return base
    if hasattr(base, "_mergeable_ranks"):
        return interop.from_tiktoken(base)
    path = Path(base)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such tokenizer file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{path} is not a tokenizer JSON file ({exc})") from None
    if not (isinstance(data, dict) and "model" in data):
        return Vocabulary.from_json(data, str(path))
    try:
        vocab = interop.from_hf(data)
    except ModelFormatError as exc:
        raise ModelFormatError(f"--extend needs a byte-level BPE vocabulary; {path}: "
                               f"{exc}") from None
    return vocab


def extend_tokenizer(base, counts: WordCounts, add, *, min_frequency: int = 0,
                     vocab_size=None, progress: bool = True):
    """A Tokenizer: ``base`` continued by ``add`` new tokens learned from ``counts``."""
    from .model import Vocabulary
    from .tokenizer import Tokenizer

    if vocab_size is not None:
        raise ConfigError("extend takes add= (new tokens to learn), not vocab_size")
    if isinstance(add, bool) or not isinstance(add, int | np.integer) or add < 1:
        raise ConfigError(f"add={add!r}: extend needs a positive number of new tokens")
    vocab = load_base(base)
    _check_layout(vocab)
    _check_counts(vocab, counts)
    started = time.perf_counter()
    words = apply_rules_in_order(counts.as_dict(), vocab.rules, len(vocab.token_bytes))
    applied = time.perf_counter()
    target = vocab.vocab_size + int(add)
    new_rules = continue_merges(words, vocab.token_bytes, target, min_frequency, progress)
    rules = np.concatenate([vocab.rules, new_rules]).astype(np.int64)
    metadata = dict(vocab.metadata, extended_from=vocab.vocab_size,
                    counts_fingerprint=counts.fingerprint,
                    seconds_applying_base=round(applied - started, 3),
                    seconds_merging=round(time.perf_counter() - applied, 3))
    extended = Vocabulary.from_rules(rules, vocab.special_tokens, vocab.pattern, metadata)
    if extended.vocab_size < target:
        warnings.warn(f"extending stopped at {extended.vocab_size} tokens, below "
                      f"{vocab.vocab_size} + add={add}: no pair left; count more text",
                      stacklevel=3)
    return Tokenizer(extended)


def _check_layout(vocab) -> None:
    """Refuse bases whose ids this layout cannot keep (see the module docstring)."""
    if _has_own_layout(vocab.layout):
        raise ConfigError(
            "the base is an imported vocabulary with its own id layout (its byte tokens, "
            "gaps or encoding rule differ from a gpubpe-trained vocabulary's); extending it "
            "while keeping its ids is not supported yet: extend a gpubpe-trained vocabulary")
    if vocab.scaffold is not None and vocab.scaffold.any():
        raise ConfigError("extending a Scaffold-BPE vocabulary is not supported: its output "
                          "ids are compact over normal tokens; extend a plain BPE vocabulary")
    if vocab.bitlevel_leads is not None:
        raise ConfigError("extend the plain vocabulary, then turn the bit-level codec on")
    if vocab.special_tokens:
        raise ConfigError(
            f"the base has special tokens {vocab.special_tokens}: new tokens must take ids "
            "above them, which needs the output-id tables of imported vocabularies (not yet "
            "in gpubpe); extend a vocabulary without special tokens for now")


def _has_own_layout(layout) -> bool:
    if layout is None:
        return False
    identity = np.array_equal(layout.output_ids, np.arange(layout.output_ids.size))
    return not identity or layout.rank_by_token or layout.whole_tokens \
        or layout.prefix_space or layout.normalizer is not None


def _check_counts(vocab, counts: WordCounts) -> None:
    check_pattern(counts, vocab.pattern, "extend")
    if sorted(counts.special_tokens) != sorted(vocab.special_tokens):
        raise ConfigError(
            f"extend: the counts were made with special tokens {counts.special_tokens}, the "
            f"base has {vocab.special_tokens}; count again with the base's special tokens")


# ---------------------------------------------------------------- the base's rules


def apply_rules_in_order(word_counts: dict[bytes, int], rules: np.ndarray, n_tokens: int):
    """Each word as token ids after the rules, applied in rank order as training does.

    When every rule creates a new token, this is what encoding gives (a merge
    then only makes pairs of higher rank), so the tokenizer's Numba word
    encoder does it. Otherwise, per word: the present pair of lowest rank at or
    after the last rule applied is merged everywhere (left to right,
    non-overlapping); rules whose pair is absent change nothing, so they are
    skipped. Returns the trainer's word table: tokens (uint32), word_start,
    word_len, word_count (int64).
    """
    words = list(word_counts)
    if _creates_every_token(rules):
        tokens, word_len = _encoded_words(words, rules)
    else:
        tokens, word_len = _words_in_rule_order(words, rules)
    if tokens.size and int(tokens.max()) >= n_tokens:
        raise ValueError("a rule produced an id outside the vocabulary")
    word_start = np.concatenate([[0], np.cumsum(word_len)[:-1]]).astype(np.int64)
    counts = np.fromiter(word_counts.values(), dtype=np.int64, count=len(words))
    return tokens, word_start, word_len, counts


def _creates_every_token(rules: np.ndarray) -> bool:
    return bool(np.array_equal(rules[:, 2], 256 + np.arange(len(rules))))


def _encoded_words(words: list[bytes], rules: np.ndarray):
    """(tokens, word_len) through the tokenizer's word encoder (every rule makes a token)."""
    from .model import Vocabulary
    from .tokenizer import Tokenizer

    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    data = np.frombuffer(b"".join(words), dtype=np.uint8)
    encoder = Tokenizer(Vocabulary.from_rules(rules, pattern=None), "cpu")._word_encoder(
        os.cpu_count() or 1)
    ids, offsets = encoder(data, starts, lengths)
    return np.asarray(ids, dtype=np.uint32), np.diff(np.asarray(offsets)).astype(np.int64)


def _words_in_rule_order(words: list[bytes], rules: np.ndarray):
    """(tokens, word_len) by applying the rules to each word in rank order (exact, Python)."""
    ranks_of: dict[tuple[int, int], list[int]] = {}
    for rank, (left, right, _) in enumerate(rules.tolist()):
        ranks_of.setdefault((left, right), []).append(rank)
    results = rules[:, 2].tolist()
    pieces = [_apply_to_word(list(word), ranks_of, results) for word in words]
    word_len = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    tokens = np.fromiter((t for piece in pieces for t in piece), dtype=np.uint32,
                         count=int(word_len.sum()))
    return tokens, word_len


def _apply_to_word(tokens: list[int], ranks_of: dict, results: list[int]) -> list[int]:
    next_rank = 0
    while len(tokens) > 1:
        best = None
        for pair in zip(tokens, tokens[1:]):
            ranks = ranks_of.get(pair)
            if ranks is None:
                continue
            at = bisect.bisect_left(ranks, next_rank)
            if at < len(ranks) and (best is None or ranks[at] < best[0]):
                best = (ranks[at], pair)
        if best is None:
            break
        rank, pair = best
        tokens = _merged(tokens, pair, results[rank])
        next_rank = rank + 1
    return tokens


def _merged(tokens: list[int], pair: tuple[int, int], result: int) -> list[int]:
    out, i = [], 0
    while i < len(tokens):
        if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == pair:
            out.append(result)
            i += 2
        else:
            out.append(tokens[i])
            i += 1
    return out


# ---------------------------------------------------------------- new rules


def continue_merges(word_table, token_bytes: list[bytes], vocab_size: int,
                    min_frequency: int = 0, progress: bool = True) -> np.ndarray:
    """New rules (n x 3) learned on a word table that already holds the base's tokens.

    Runs the trainer's Numba merge loop from a state seeded with the base's
    tokens (their bytes, so a merge that spells an existing token points at it).

    Performance notes: this reuses ``gpubpe.trainer``'s CPU state; when the
    device training loop lands, seeding it with initial tokens is the same
    hook. Applying a 50K-rule base to 15K distinct words took 0.38 s in
    Python (25 us a word); through the tokenizer's Numba word encoder, used
    when every base rule makes a token (all trained vocabularies seen so far),
    it takes a few ms. Bases with rules pointing at existing tokens keep the
    Python path.
    """
    from tqdm.auto import tqdm

    state = _SeededState(word_table, token_bytes, vocab_size, max(min_frequency, 1))
    batches = [np.zeros((0, 3), np.int64)]
    with tqdm(total=vocab_size - len(token_bytes), desc="merges", unit="tok",
              disable=not progress, leave=False) as bar:
        while True:
            rules, _, stop = state.run(_RULES_PER_CALL)
            batches.append(rules)
            bar.update(len(rules))
            if stop:
                break
    return np.concatenate(batches)


class _SeededState(_CpuTrainState):
    """The trainer's CPU state, starting from existing tokens instead of the 256 bytes."""

    def __init__(self, word_table, token_bytes: list[bytes], vocab_size: int, min_count: int):
        self.params = (vocab_size, min_count, False)
        self.tokens, self.word_start, self.word_len, self.word_count = word_table
        index, n_slots, n_postings = build_pair_index_cpu(
            self.tokens, self.word_start, self.word_len, self.word_count, HF_BYTE_RANK)
        self.arrays = index
        self.arrays["touched"] = np.zeros(1024, np.int64)
        self.word_stamp = np.full(len(self.word_count), -1, np.int64)
        self.sizes = np.zeros(SIZES_LENGTH, np.int64)
        self.sizes[N_SLOTS], self.sizes[N_POSTINGS] = n_slots, n_postings
        self._init_heap(n_slots)
        self._init_tokens(max(vocab_size, len(token_bytes) + 1), word_table)
        self._seed(token_bytes)

    def _seed(self, token_bytes: list[bytes]) -> None:
        """Put the base's merged tokens in the byte pool and the bytes -> id table."""
        a = self.arrays
        data = np.frombuffer(b"".join(token_bytes[256:]), dtype=np.uint8)
        if a["pool"].size < 256 + 2 * data.size:
            a["pool"] = _grown(a["pool"], 256 + 2 * data.size + 1024)
        a["pool"][256:256 + data.size] = data
        at = 256
        for token, piece in enumerate(token_bytes[256:], start=256):
            a["token_start"][token], a["token_len"][token] = at, len(piece)
            a["token_hash"][token] = hash_bytes(a["pool"], at, len(piece))
            if table_find(a["vocab_keys"], a["vocab_values"], a["token_hash"][token]) < 0:
                table_put(a["vocab_keys"], a["vocab_values"], a["token_hash"][token], token)
            at += len(piece)
        self.sizes[N_TOKENS] = self.sizes[N_NORMAL] = len(token_bytes)
        self.sizes[POOL_USED] = at
