"""Measures of a tokenization: length, entropy, redundancy, Rényi efficiency, bit-level gains.

Counts are token histograms (int64, indexed by id; see :func:`token_frequencies`).
Entropies are in bits. The definitions follow the papers gpubpe implements:

- Shannon entropy ``H = -sum p log2 p`` and redundancy ``R = 1 - H / log2 |V|``
  (Scaffold-BPE, Lian et al., eq. 4-5);
- Rényi entropy ``H_a = log2(sum p^a) / (1 - a)`` and Rényi efficiency
  ``H_a / log2 |V|`` (Zouhar et al. 2023, used by the bit-level BPE paper, whose
  Table 3 calls it "entropy");
- relative gain ``|T_control| / |T_experiment|`` (bit-level BPE paper, §5).

``|V|`` is the vocabulary size: by default the length of the histogram.

>>> counts = token_frequencies([0, 1, 1, 2, 2, 2, 2, 3], vocab_size=4)
>>> counts.tolist()
[1, 2, 4, 1]
>>> shannon_entropy(counts)
1.75
>>> round(redundancy(counts), 4)
0.125
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .errors import ConfigError


def bytes_per_token(n_bytes: int, n_tokens: int) -> float:
    """Average UTF-8 bytes per token (higher: the tokenizer compresses more).

    >>> bytes_per_token(12, 4)
    3.0
    """
    if n_tokens <= 0:
        raise ConfigError(f"n_tokens={n_tokens}: bytes per token needs at least one token")
    return n_bytes / n_tokens


def token_frequencies(ids, vocab_size: int) -> np.ndarray:
    """int64[vocab_size]: how often each id occurs in ``ids`` (a sequence or flat batch).

    >>> token_frequencies([2, 0, 2], vocab_size=4).tolist()
    [1, 0, 2, 0]
    """
    array = np.asarray(ids)
    if array.size == 0:
        return np.zeros(vocab_size, dtype=np.int64)
    array = array.reshape(-1)
    if not np.issubdtype(array.dtype, np.integer):
        raise ConfigError(f"ids must be integers, got dtype {array.dtype}")
    if array.min() < 0 or array.max() >= vocab_size:
        bad = array[(array < 0) | (array >= vocab_size)][0]
        raise ConfigError(f"id {bad} is outside 0..{vocab_size - 1}; pass a vocab_size above "
                          "the largest id")
    return np.bincount(array.astype(np.int64), minlength=vocab_size).astype(np.int64)


def _probabilities(counts) -> np.ndarray:
    """The non-zero probabilities of a histogram."""
    counts = np.asarray(counts, dtype=np.float64).reshape(-1)
    if np.any(counts < 0):
        raise ConfigError("counts must not be negative")
    total = counts.sum()
    if total <= 0:
        raise ConfigError("counts sum to 0: entropy needs at least one token")
    return counts[counts > 0] / total


def _log2_vocab_size(counts, vocab_size) -> float:
    size = np.asarray(counts).size if vocab_size is None else int(vocab_size)
    if size < 2:
        raise ConfigError(f"vocab_size={size}: efficiency and redundancy need |V| >= 2")
    return math.log2(size)


def shannon_entropy(counts) -> float:
    """Shannon entropy of a token histogram, in bits (eq. 4 of Scaffold-BPE).

    >>> shannon_entropy([1, 1, 2])
    1.5
    """
    p = _probabilities(counts)
    return float(-(p * np.log2(p)).sum()) + 0.0


def redundancy(counts, vocab_size: int | None = None) -> float:
    """``1 - H / log2 |V|`` (eq. 5 of Scaffold-BPE); |V| defaults to ``len(counts)``.

    0 for a uniform use of the whole vocabulary, near 1 when a few tokens dominate.

    >>> redundancy([5, 5, 5, 5])
    0.0
    """
    return 1.0 - shannon_entropy(counts) / _log2_vocab_size(counts, vocab_size)


def renyi_entropy(counts, alpha: float = 2.5) -> float:
    """Rényi entropy of order ``alpha`` in bits (Shannon at alpha = 1, min-entropy at inf).

    >>> renyi_entropy([1, 1, 1, 1], alpha=2.5)
    2.0
    """
    p = _probabilities(counts)
    if alpha < 0:
        raise ConfigError(f"alpha={alpha}: Rényi entropy needs alpha >= 0")
    if alpha == 1:
        return float(-(p * np.log2(p)).sum()) + 0.0
    if math.isinf(alpha):
        return float(-np.log2(p.max())) + 0.0
    return float(np.log2(np.sum(p**alpha)) / (1.0 - alpha)) + 0.0


def renyi_efficiency(counts, alpha: float = 2.5, vocab_size: int | None = None) -> float:
    """Rényi efficiency ``H_alpha / log2 |V|`` (Zouhar et al. 2023); |V| defaults to len(counts).

    >>> renyi_efficiency([1, 1, 1, 1])
    1.0
    >>> round(renyi_efficiency([1, 1, 1, 1], vocab_size=16), 3)
    0.5
    """
    return renyi_entropy(counts, alpha) / _log2_vocab_size(counts, vocab_size)


@dataclass(frozen=True)
class BitLevelReport:
    """One corpus before and after the bit-level codec: the paper's Table 3 and gain.

    ``byte_*`` counts and efficiencies cover the byte-level portion: byte tokens
    before; byte tokens left plus every codec id (values and prefixes) after. The
    byte portion's |V| is the number of byte ids of the base vocabulary before,
    plus the codec's 256 + n_prefixes ids after.
    """

    tokens_before: int
    tokens_after: int
    token_reduction_pct: float
    byte_tokens_before: int
    byte_tokens_after: int
    byte_token_reduction_pct: float
    efficiency_before: float
    efficiency_after: float
    byte_efficiency_before: float
    byte_efficiency_after: float
    relative_gain: float
    alpha: float

    def as_dict(self) -> dict:
        return asdict(self)


def bitlevel_report(ids_batch_or_seq, codec, base_is_byte=lambda token_id: token_id < 256, *,
                    offsets=None, alpha: float = 2.5) -> BitLevelReport:
    """Measure what ``codec`` (a :class:`gpubpe.bitlevel.BitLevelCodec`) does to a corpus.

    ``ids_batch_or_seq``: one sequence of base ids, a list of sequences, or flat ids
    with ``offsets``. ``base_is_byte`` tells which base ids are byte-level tokens;
    it is called on an array of ids (or, if that fails, on each distinct id).

    Worked example, the paper's §3.3: the 9 byte tokens E4 BC 97 E5 94 A4 E4 BC 97
    become p1 5E 97 CA A4 5E 97, 7 tokens: 2/9 = 22.22% fewer.

    >>> from gpubpe.bitlevel import BitLevelCodec, PAPER_LEAD_BYTES
    >>> codec = BitLevelCodec(base_vocab_size=32000, lead_bytes=PAPER_LEAD_BYTES)
    >>> report = bitlevel_report(list(bytes.fromhex("E4BC97E594A4E4BC97")), codec)
    >>> report.tokens_before, report.tokens_after, round(report.token_reduction_pct, 2)
    (9, 7, 22.22)
    >>> round(report.relative_gain, 4)
    1.2857
    """
    flat, offsets = _flat_batch(ids_batch_or_seq, offsets)
    coded, _ = codec.encode_batch(flat, offsets)
    counts_before = token_frequencies(flat, codec.base_vocab_size)
    counts_after = token_frequencies(coded, codec.vocab_size)
    byte_ids = _byte_mask(base_is_byte, codec.base_vocab_size)
    byte_ids_after = np.concatenate([byte_ids, np.ones(codec.vocab_size - byte_ids.size, bool)])
    tokens = int(flat.size), int(coded.size)
    byte_tokens = int(counts_before[byte_ids].sum()), int(counts_after[byte_ids_after].sum())
    return BitLevelReport(
        tokens_before=tokens[0],
        tokens_after=tokens[1],
        token_reduction_pct=_reduction_pct(*tokens),
        byte_tokens_before=byte_tokens[0],
        byte_tokens_after=byte_tokens[1],
        byte_token_reduction_pct=_reduction_pct(*byte_tokens),
        efficiency_before=_efficiency_or_nan(counts_before, alpha, codec.base_vocab_size),
        efficiency_after=_efficiency_or_nan(counts_after, alpha, codec.vocab_size),
        byte_efficiency_before=_efficiency_or_nan(counts_before[byte_ids], alpha),
        byte_efficiency_after=_efficiency_or_nan(counts_after[byte_ids_after], alpha),
        relative_gain=tokens[0] / tokens[1] if tokens[1] else math.nan,
        alpha=alpha,
    )


def _flat_batch(ids_batch_or_seq, offsets):
    """Flat uint32 ids and int64 offsets from a sequence, a list of sequences or ids + offsets."""
    if offsets is not None:
        return np.asarray(ids_batch_or_seq, dtype=np.uint32), np.asarray(offsets, dtype=np.int64)
    items = ids_batch_or_seq
    if isinstance(items, np.ndarray):
        sequences = list(items) if items.ndim == 2 else [items]
    elif len(items) and all(np.ndim(item) == 1 for item in items):
        sequences = list(items)
    else:
        sequences = [items]
    sequences = [np.asarray(s, dtype=np.uint32).reshape(-1) for s in sequences]
    lengths = np.array([s.size for s in sequences], dtype=np.int64)
    return np.concatenate(sequences), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _byte_mask(base_is_byte, base_vocab_size) -> np.ndarray:
    """bool[base_vocab_size]: which base ids are byte-level tokens."""
    all_ids = np.arange(base_vocab_size, dtype=np.int64)
    try:
        mask = np.asarray(base_is_byte(all_ids), dtype=bool)
    except Exception:  # a predicate written for one id at a time
        mask = None
    if mask is None or mask.shape != all_ids.shape:
        mask = np.fromiter((bool(base_is_byte(int(i))) for i in all_ids), dtype=bool,
                           count=base_vocab_size)
    return mask


def _reduction_pct(before: int, after: int) -> float:
    return 100.0 * (before - after) / before if before else math.nan


def _efficiency_or_nan(counts, alpha, vocab_size=None) -> float:
    """Rényi efficiency, or NaN where it is undefined (no tokens, |V| < 2)."""
    if np.sum(counts) == 0 or (vocab_size or np.size(counts)) < 2:
        return math.nan
    return renyi_efficiency(counts, alpha, vocab_size)
