"""Extend a vocabulary: continue BPE from an existing tokenizer on new word counts.

Old ids keep their meaning; new tokens take ids above every existing id (special
tokens included), in creation order; ties between equal counts break by the
base's ids. What "apply the base's merges first" means depends on how the base
encodes:

- By rules (gpubpe, HF ``tokenizer.json``, GPT-2 ``vocab.json`` + ``merges.txt``):
  the rules are applied to every counted word in rank order, exactly as training
  applied them (not by encoding: a rule pointing at an existing token can make a
  pair of lower rank, which training had already passed), then new rules are
  chosen as usual by the trainer's Numba loop. Reference:
  ``_reference.continue_bpe`` (on the corpus a gpubpe vocabulary was trained on,
  extending a size-N vocabulary by K equals training at N + K). Ties: the byte
  tokens by their ids in the base (bytes numbered by value, gpubpe's own ids:
  HF's byte rank, the training order), merged tokens by id after them.
- By token rank (tiktoken): there are no rules to replay (an import lists every
  split of a token at its rank). Each word starts as tiktoken's own BPE makes it,
  and after each new token every word is what tiktoken would make of it with the
  ranks so far; pairs are counted on those encodings. Reference:
  ``_reference.continue_tiktoken``; the new ranks written to a ``.tiktoken`` file
  give the same ids in tiktoken.
- By rules after a whole-word lookup (HF ``ignore_merges``, as Llama 3's file):
  the same, with HF's encoding (a word that is a token is that token, else the
  rules by rank). Reference: ``_reference.continue_whole_word_bpe``. Ties in
  these two: the pair of smaller ids in the base (new tokens above all).

Refused, with the reason: Scaffold-BPE and bit-level bases, bases that change
text before splitting (HF prefix space, a normalizer: counts files do not), bases
without all 256 byte tokens, rule-based imports (without whole-word lookup)
whose byte tokens are numbered among the merged ones.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import json
import os
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ._threads import thread_count
from .counts import WordCounts, check_pattern
from .errors import ConfigError, ModelFormatError
from .kernels.encode.rules import all_splits
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
from .trainer import CPU_MERGES_PER_STEP, HF_BYTE_RANK, CpuTrainState, _grown

_BYTE_LEVEL = "--extend needs a byte-level BPE vocabulary"


def load_base(base, pattern=None):
    """The base as a :class:`~gpubpe.model.Vocabulary`: a Tokenizer, a Vocabulary, a
    ``tiktoken.Encoding``, ``"tiktoken:NAME"`` (an encoding tiktoken loads by name), a
    ``.tiktoken`` rank file (split with ``pattern``, the counts' pattern), a gpubpe file, a
    HF ``tokenizer.json``, or a GPT-2 ``vocab.json`` with ``merges.txt`` beside it.
    Anything not byte-level BPE is refused, saying so."""
    from . import interop
    from .model import Vocabulary
    from .tokenizer import Tokenizer

    if isinstance(base, Tokenizer):
        return base.vocabulary
    if isinstance(base, Vocabulary):
        return base
    if hasattr(base, "_mergeable_ranks"):
        return _byte_level(interop.from_tiktoken, base)
    if not isinstance(base, str | os.PathLike):
        raise ConfigError(f"extend={base!r}: expected a Tokenizer, a tokenizer file, a "
                          "tiktoken.Encoding or 'tiktoken:NAME'")
    if os.fspath(base).startswith("tiktoken:"):
        return _byte_level(interop.from_tiktoken, _tiktoken_encoding(os.fspath(base)[9:]))
    path = Path(base)
    if path.suffix == ".tiktoken":
        if not path.is_file():
            raise ModelFormatError(f"{path}: no such tiktoken rank file")
        return _byte_level(interop.from_tiktoken, path, "gpt2" if pattern is None else pattern)
    data = _json_of(path)
    if isinstance(data, dict) and "model" in data:
        return _byte_level(interop.from_hf, data, where=str(path))
    if isinstance(data, dict) and data and "format" not in data and all(
            isinstance(i, int) for i in data.values()):  # GPT-2's token -> id table
        merges = _gpt2_merges_beside(path)
        return _byte_level(interop.from_gpt2_files, path, merges, where=str(path))
    return Vocabulary.from_json(data, str(path))


def _gpt2_merges_beside(vocab_path: Path) -> Path:
    """``merges.txt`` (or ``X-merges.txt`` for ``X-vocab.json``) beside a GPT-2 vocab.json."""
    names = dict.fromkeys(["merges.txt", vocab_path.name.replace("vocab.json", "merges.txt")])
    for name in names:
        if vocab_path.with_name(name).is_file():
            return vocab_path.with_name(name)
    raise ModelFormatError(f"{vocab_path} looks like GPT-2's vocab.json (token -> id), but no "
                           f"{' or '.join(names)} is beside it; put its merges file there")


def _json_of(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such tokenizer file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{path} is not a tokenizer JSON file ({exc})") from None


def _byte_level(importer, *args, where: str | None = None):
    """``importer(*args)``, its format errors said as 'not byte-level BPE'."""
    try:
        return importer(*args)
    except ModelFormatError as exc:
        prefix = f"{where}: " if where and not str(exc).startswith(where) else ""
        raise ModelFormatError(f"{_BYTE_LEVEL}; {prefix}{exc}") from None


def _tiktoken_encoding(name: str):
    try:
        import tiktoken
    except ImportError:
        raise ConfigError("tiktoken is not installed; pip install tiktoken") from None
    try:
        return tiktoken.get_encoding(name)
    except ValueError as exc:
        raise ConfigError(f"tiktoken:{name}: tiktoken has no such encoding ({exc})") from None
    except Exception as exc:  # tiktoken downloads ranks it has not cached: network errors
        raise ConfigError(f"tiktoken:{name}: tiktoken could not load it ({exc}); pass its "
                          ".tiktoken rank file instead") from None


def extend_tokenizer(base, counts: WordCounts, add, *, min_frequency: int = 0,
                     vocab_size=None, progress: bool = True, normalized: bool = False):
    """A Tokenizer: ``base`` continued by ``add`` new tokens learned from ``counts``
    (``normalized``: counted from text the base's normalizer was run on)."""
    from .tokenizer import Tokenizer

    if vocab_size is not None:
        raise ConfigError("extend takes add= (new tokens to learn), not vocab_size")
    if isinstance(add, bool) or not isinstance(add, int | np.integer) or add < 1:
        raise ConfigError(f"add={add!r}: extend needs a positive number of new tokens")
    vocab = load_base(base, counts.pattern)
    _check_base(vocab, normalized)
    _check_counts(vocab, counts)
    if vocab.layout is not None and vocab.layout.whole_tokens:
        extended = _extend_by_encoding(vocab, counts, int(add), min_frequency, progress)
    else:
        extended = _extend_by_rules(vocab, counts, int(add), min_frequency, progress)
    extended.template = vocab.template
    if extended.vocab_size < vocab.vocab_size + add:
        warnings.warn(f"extending stopped at {extended.vocab_size} tokens, below "
                      f"{vocab.vocab_size} + add={add}: no pair left; count more text",
                      stacklevel=3)
    return Tokenizer(extended)


def _metadata(vocab, counts: WordCounts, seconds: dict) -> dict:
    return dict(vocab.metadata, extended_from=vocab.vocab_size, extended_above_id=vocab.n_ids,
                counts_fingerprint=counts.fingerprint,
                **{k: round(v, 3) for k, v in seconds.items()})


def _extend_by_rules(vocab, counts: WordCounts, add: int, min_frequency: int, progress: bool):
    """The base's rules replayed on the words, then new rules from the trainer's loop."""
    from .model import Vocabulary

    started = time.perf_counter()
    words = apply_rules_in_order(counts.as_dict(), vocab.rules, len(vocab.token_bytes))
    applied = time.perf_counter()
    new_rules = continue_merges(words, vocab.token_bytes, len(vocab.token_bytes) + add,
                                min_frequency, progress, _byte_tie_rank(vocab))
    rules = np.concatenate([vocab.rules, new_rules]).astype(np.int64)
    metadata = _metadata(vocab, counts, {"seconds_applying_base": applied - started,
                                         "seconds_merging": time.perf_counter() - applied})
    if vocab.layout is None and not vocab.special_tokens:  # ids are internal ids
        return Vocabulary.from_rules(rules, vocab.special_tokens, vocab.pattern, metadata)
    token_bytes = list(vocab.token_bytes)
    for left, right, result in new_rules.tolist():
        if result == len(token_bytes):
            token_bytes.append(token_bytes[left] + token_bytes[right])
    layout = _layout_with_new_ids(vocab, len(token_bytes) - len(vocab.token_bytes))
    return Vocabulary.from_tokens(token_bytes, rules, layout, vocab.special_tokens,
                                  vocab.pattern, metadata)


def _extend_by_encoding(vocab, counts: WordCounts, add: int, min_frequency: int,
                        progress: bool):
    """Words kept as the base's own rule encodes them (tiktoken's, or HF's with whole
    words first) while tokens are added; see the module docstring."""
    from .model import Vocabulary

    started = time.perf_counter()
    rule = _TiktokenRule(vocab) if vocab.layout.rank_by_token else _WholeWordRules(vocab)
    words = _EncodedWords(counts.as_dict(), vocab, rule)
    applied = time.perf_counter()
    new_rules = words.continue_tokens(add, vocab.n_ids, max(min_frequency, 1), progress)
    metadata = _metadata(vocab, counts, {"seconds_applying_base": applied - started,
                                         "seconds_merging": time.perf_counter() - applied})
    n_new = len(rule.id_of) - len(vocab.token_bytes)
    first_new = vocab.n_ids  # a pass over the layout's output ids: read once, not per token
    token_bytes = vocab.token_bytes + [rule.piece_of[first_new + k] for k in range(n_new)]
    if vocab.layout.rank_by_token:
        rules = all_splits(token_bytes)  # tiktoken's rule: every split, at the token's rank
        return Vocabulary.from_tokens(token_bytes, rules, _layout_with_new_ids(vocab, n_new),
                                      vocab.special_tokens, vocab.pattern, metadata)
    internal = {int(o): i for i, o in enumerate(vocab.layout.output_ids.tolist())}
    internal.update({first_new + k: len(vocab.token_bytes) + k for k in range(n_new)})
    added = np.array([[internal[token] for token in new_rule] for new_rule in new_rules],
                     dtype=np.int64).reshape(-1, 3)
    rules = np.concatenate([vocab.rules, added])
    return Vocabulary.from_tokens(token_bytes, rules, _layout_with_new_ids(vocab, n_new),
                                  vocab.special_tokens, vocab.pattern, metadata)


def _layout_with_new_ids(vocab, n_new: int):
    """The base's id layout (gpubpe's own: identity, special tokens after it) with ``n_new``
    tokens numbered from the base's ``n_ids`` up."""
    from .model import own_layout

    layout = vocab.layout or own_layout(vocab)
    new_ids = vocab.n_ids + np.arange(n_new, dtype=np.int64)
    return dataclasses.replace(layout, output_ids=np.concatenate([layout.output_ids, new_ids]))


def _byte_tie_rank(vocab) -> np.ndarray:
    """int64[256]: each byte token's place in the tie order (merged tokens come after, by id).

    Bytes numbered by value are gpubpe's own numbering (a file gpubpe exported): its
    ties follow its training's order, HF's byte rank, so extending the export equals
    extending the tokenizer. Any other numbering is the tie order itself.
    """
    byte_ids = np.arange(256) if vocab.layout is None else vocab.layout.output_ids[:256]
    if np.array_equal(byte_ids, np.arange(256)):
        return HF_BYTE_RANK
    rank = np.empty(256, dtype=np.int64)
    rank[np.argsort(vocab.layout.output_ids[:256], kind="stable")] = np.arange(256)
    return rank


def _check_base(vocab, normalized: bool = False) -> None:
    """Refuse bases this module cannot continue while keeping their ids (module docstring);
    ``normalized``: the counts were made from text normalized as the base normalizes it."""
    if vocab.scaffold is not None and vocab.scaffold.any():
        raise ConfigError("extending a Scaffold-BPE vocabulary is not supported: its output "
                          "ids are compact over normal tokens; extend a plain BPE vocabulary")
    if vocab.bitlevel_leads is not None:
        raise ConfigError("extend the plain vocabulary, then turn the bit-level codec on")
    if vocab.layout is not None:
        _check_layout(vocab.layout, normalized)


def _check_layout(layout, normalized: bool = False) -> None:
    if layout.metaspace:
        raise ConfigError("the base is a SentencePiece-style vocabulary (characters, '▁' for "
                          "spaces, <0xXX> byte fallback); gpubpe extends byte-level BPE only")
    if layout.text_change() is not None and (layout.prefix_space or not normalized):
        raise ConfigError(f"the base {layout.text_change()} before splitting, which counts "
                          "files do not record; extend a base without a normalizer or "
                          "add_prefix_space")
    if layout.rank_by_token and not layout.whole_tokens:
        raise ConfigError("the base merges by token rank without looking up whole words "
                          "first, which is neither tiktoken's rule nor HF's; it cannot be "
                          "extended")
    byte_ids, other_ids = layout.output_ids[:256], layout.output_ids[256:]
    if (byte_ids < 0).any():
        byte = int(np.flatnonzero(byte_ids < 0)[0])
        raise ConfigError(f"byte {byte:#04x} has no id in the base; extending needs all 256 "
                          "byte tokens (the new tokens may hold any byte)")
    if not layout.whole_tokens and other_ids.size and (
            byte_ids.max() > other_ids.min() or (np.diff(other_ids) <= 0).any()):
        raise ConfigError("the base numbers its byte tokens among its merged tokens; ties "
                          "between equal counts could not follow its ids in the trainer's "
                          "tie order (bytes first): extend a base whose bytes come first")


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
        thread_count(None))
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
                    min_frequency: int = 0, progress: bool = True,
                    byte_rank: np.ndarray = HF_BYTE_RANK) -> np.ndarray:
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

    state = _SeededState(word_table, token_bytes, vocab_size, max(min_frequency, 1), byte_rank)
    batches = [np.zeros((0, 3), np.int64)]
    with tqdm(total=vocab_size - len(token_bytes), desc="merges", unit="tok",
              disable=not progress, leave=False) as bar:
        while True:
            rules, _, stop = state.run(CPU_MERGES_PER_STEP)
            batches.append(rules)
            bar.update(len(rules))
            if stop:
                break
    return np.concatenate(batches)


class _SeededState(CpuTrainState):
    """The trainer's CPU state, starting from existing tokens instead of the 256 bytes."""

    def __init__(self, word_table, token_bytes: list[bytes], vocab_size: int, min_count: int,
                 byte_rank: np.ndarray):
        self.params = (vocab_size, min_count, False)
        self.byte_rank = byte_rank
        self.tokens, self.word_start, self.word_len, self.word_count = word_table
        index, n_slots, n_postings = build_pair_index_cpu(
            self.tokens, self.word_start, self.word_len, self.word_count, byte_rank)
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


# ---------------------------------------------------------------- encoding rules


class _EncodedWords:
    """Distinct words as the base's rule encodes them (lists of ids), their pair counts kept
    current as tokens are added, and a heap of pairs (largest count, then smallest ids).

    A new rule or token has the highest rank, so it changes only words holding a pair
    that reaches it (``rule.pairs_reaching``), or that are its bytes (whole-word
    lookup). Encoding any other word never sees it. A changed word's encoding goes on
    from its current parts: they are where the base's loop stopped with the lower
    ranks, and a lower-ranked merge made afterwards (the new token next to a part that
    joins into an older token) is made here too.

    Performance notes: Python, with work per new token proportional to the words it
    changes; the words start from the base tokenizer's Numba encoder. The trainer's Numba
    loop merges one pair's occurrences, which is not tiktoken's rule (other splits of the
    new token, lower-ranked merges after it, whole words), so it is not used here. Measured
    (``bench/extend_bench.py``): 1,000 tokens added to cl100k on 17k distinct words in
    0.02-0.06 s; building the 101k-token extended vocabulary dominated (every split of
    every token again, as an import does: 1.1-1.8x the import). Deriving only the new
    tokens' splits in Python (two sorted lists) brought the whole call to 0.65x; since
    session 22 every split of the whole table is one kernel (``all_splits``, ~0.07 s for
    cl100k), as an import's.
    """

    def __init__(self, word_counts: dict[bytes, int], vocab, rule):
        self.rule = rule
        self.words = list(word_counts)
        self.counts = list(word_counts.values())
        self.word_index = {word: w for w, word in enumerate(self.words)}
        self.parts = _base_encodings(self.words, vocab)
        self.pair_count: Counter = Counter()
        self.pair_words: defaultdict = defaultdict(set)
        for w in range(len(self.words)):
            self._count(w, +1)
        self.heap = [(-count, *pair) for pair, count in self.pair_count.items()]
        heapq.heapify(self.heap)

    def continue_tokens(self, add: int, first_id: int, min_count: int,
                        progress: bool) -> list[tuple[int, int, int]]:
        """New rules ``(left, right, result)`` in the base's ids until ``add`` new tokens
        exist (ids from ``first_id`` up) or no pair reaches ``min_count``."""
        from tqdm.auto import tqdm

        rules: list[tuple[int, int, int]] = []
        next_id = first_id
        with tqdm(total=add, desc="merges", unit="tok", disable=not progress,
                  leave=False) as bar:
            while next_id < first_id + add:
                pair = self._best_pair(min_count)
                if pair is None:
                    break
                piece = self.rule.piece_of[pair[0]] + self.rule.piece_of[pair[1]]
                result = self.rule.add(pair, piece, next_id)
                rules.append((*pair, result))
                if result == next_id:
                    next_id += 1
                    bar.update(1)
                for w in self._words_reaching(piece, pair):
                    self._reencode(w)
        return rules

    def _best_pair(self, min_count: int):
        while self.heap:
            negated, left, right = self.heap[0]
            if self.pair_count.get((left, right), 0) == -negated:
                return (left, right) if -negated >= min_count else None
            heapq.heappop(self.heap)  # stale: the count changed since it was pushed
        return None

    def _words_reaching(self, piece: bytes, pair: tuple[int, int]) -> set[int]:
        found = set()
        for reaching in self.rule.pairs_reaching(piece, pair):
            found |= self.pair_words.get(reaching, set())
        if piece in self.word_index:
            found.add(self.word_index[piece])
        return found

    def _reencode(self, w: int) -> None:
        word, old = self.words[w], self.parts[w]
        whole = self.rule.id_of.get(word)
        parts = [whole] if whole is not None else self.rule.merged(list(old))
        if parts == old:
            return
        self._count(w, -1)
        self.parts[w] = parts
        self._count(w, +1)
        for pair in set(zip(old, old[1:])) | set(zip(parts, parts[1:])):
            if self.pair_count[pair] > 0:  # entries with the old count are now stale
                heapq.heappush(self.heap, (-self.pair_count[pair], *pair))

    def _count(self, w: int, sign: int) -> None:
        parts, weight = self.parts[w], sign * self.counts[w]
        for pair in zip(parts, parts[1:]):
            self.pair_count[pair] += weight
            if sign > 0:
                self.pair_words[pair].add(w)
            else:
                self.pair_words[pair].discard(w)


class _TiktokenRule:
    """tiktoken's rule in its ranks (the ids): any adjacent pair whose joined bytes are a
    token merges at that token's rank, lowest first. A chosen pair always makes a new token
    (the loop stops only when no adjacent pair joins into one)."""

    def __init__(self, vocab):
        self.id_of = dict(zip(vocab.token_bytes, vocab.layout.output_ids.tolist()))
        self.piece_of = {token: piece for piece, token in self.id_of.items()}

    def merged(self, parts: list[int]) -> list[int]:
        return _tiktoken_merges([self.piece_of[p] for p in parts], self.id_of)

    def pairs_reaching(self, piece: bytes, pair) -> list[tuple[int, int]]:
        """Every split of ``piece`` into two tokens: each merges into it."""
        splits = ((self.id_of.get(piece[:cut]), self.id_of.get(piece[cut:]))
                  for cut in range(1, len(piece)))
        return [(a, b) for a, b in splits if a is not None and b is not None]

    def add(self, pair, piece: bytes, new_id: int) -> int:
        self.id_of[piece], self.piece_of[new_id] = new_id, piece
        return new_id


class _WholeWordRules:
    """HF BPE with ``ignore_merges`` in its ids: a word that is a token is that token, else
    rules by rank (a pair's first rule wins), leftmost on ties. A chosen pair whose bytes
    already are a token gets a rule pointing at it and makes none."""

    def __init__(self, vocab):
        output = vocab.layout.output_ids.tolist()
        self.id_of = dict(zip(vocab.token_bytes, output))
        self.piece_of = {token: piece for piece, token in self.id_of.items()}
        self.rule_of: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (left, right, result) in enumerate(vocab.rules.tolist()):
            self.rule_of.setdefault((output[left], output[right]), (rank, output[result]))
        self.n_rules = len(vocab.rules)

    def merged(self, parts: list[int]) -> list[int]:
        while len(parts) > 1:
            found = [(self.rule_of[pair][0], at) for at, pair in enumerate(zip(parts, parts[1:]))
                     if pair in self.rule_of]
            if not found:
                break
            at = min(found)[1]
            parts[at:at + 2] = [self.rule_of[(parts[at], parts[at + 1])][1]]
        return parts

    def pairs_reaching(self, piece: bytes, pair) -> list[tuple[int, int]]:
        return [pair]

    def add(self, pair, piece: bytes, new_id: int) -> int:
        result = self.id_of.get(piece)
        if result is None:
            result = self.id_of[piece] = new_id
            self.piece_of[new_id] = piece
        self.rule_of[pair] = (self.n_rules, result)
        self.n_rules += 1
        return result


def _tiktoken_merges(pieces: list[bytes], ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's BPE loop from ``pieces`` on: merge the adjacent pair whose joined bytes have
    the lowest rank (leftmost on ties) while one is left; the ranks of the parts."""
    while len(pieces) > 1:
        best = None
        for at in range(len(pieces) - 1):
            rank = ranks.get(pieces[at] + pieces[at + 1])
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, at)
        if best is None:
            break
        at = best[1]
        pieces[at:at + 2] = [pieces[at] + pieces[at + 1]]
    return [ranks[piece] for piece in pieces]


def _base_encodings(words: list[bytes], vocab) -> list[list[int]]:
    """Each word's ids (tiktoken ranks) under the base, through the tokenizer's word encoder."""
    from .tokenizer import Tokenizer

    if not words:
        return []
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    data = np.frombuffer(b"".join(words), dtype=np.uint8)
    ids, offsets = Tokenizer(vocab, "cpu")._word_encoder(thread_count(None))(
        data, starts, lengths)
    ids, offsets = np.asarray(ids).tolist(), np.asarray(offsets).tolist()
    return [ids[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
