"""Many vocabularies from one training run: cuts, truncation, and the size sweep.

Classic BPE's rules at size N are the rules of a larger run up to the point
where its token count first reaches N: the trainer's state before that point
does not depend on where it will stop. Not always N - 256 rules, since a rule
may point at an existing token and create none. Scaffold-BPE is the same with
the count of *normal* tokens, and the scaffold flags are those in force at
that point, not the final ones; they come from the trainer's event log.

Event log (the format of the training loop, DESIGN §4a): int64 rows
``(kind, value)`` in the order they happened:

- ``EVENT_RULE`` (0): a rule was appended; value = its index in the rules;
- ``EVENT_SCAFFOLD`` (1): a token became scaffold; value = token id;
- ``EVENT_READMIT`` (2): a scaffold token became normal again; value = token id.

An iteration of the trainer is one rule (and the scaffold marks after it) or
one re-admission, and the trainer checks its stop condition between
iterations, so a cut can only fall before a rule or re-admission row.
:func:`cut_rules` replays the rows to the first such boundary where the
normal-token count has reached N.

:func:`sweep` trains once per variant at the largest size and cuts the
smaller sizes out of that run (``train_from_counts(..., with_events=True)``
gives the log, the same on the CPU and on a device). A trainer that gives no
log (``Trainer`` returning ``None`` events) is run once per size instead.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from .errors import ConfigError

EVENT_RULE, EVENT_SCAFFOLD, EVENT_READMIT = 0, 1, 2
VARIANTS = ("bpe", "scaffold")
METRICS = ("bytes_per_token", "entropy", "redundancy", "renyi_efficiency", "scaffold_share",
           "seconds_training")


# ---------------------------------------------------------------- cutting a run


def cut_rules(rules, events, final_scaffold, vocab_size: int):
    """(rules, scaffold flags) of a training stopped at ``vocab_size`` normal tokens.

    ``rules``: the (n x 3) rules of a longer run; ``events``: its event log (int64
    rows ``(kind, value)``), or None for classic BPE; ``final_scaffold``: the
    run's final flags (bool per internal id; None for BPE), checked against the
    replay. Flags returned are those in force at the cut (None for BPE).

    >>> rules = [(97, 97, 256), (256, 97, 257), (256, 256, 258)]
    >>> cut_rules(rules, None, None, 258)[0].tolist()
    [[97, 97, 256], [256, 97, 257]]
    """
    rules = np.asarray(rules, dtype=np.int64).reshape(-1, 3)
    _check_size(vocab_size)
    if events is None:
        return rules[:_bpe_cut(rules, vocab_size)], None
    events = np.asarray(events, dtype=np.int64).reshape(-1, 2)
    kept, flags = _replay_events(rules, events, final_scaffold, vocab_size)
    return rules[:kept], flags


def _check_size(vocab_size) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer) \
            or vocab_size < 256:
        raise ConfigError(f"vocab_size={vocab_size!r}: a cut needs an int of at least 256 "
                          "(the byte tokens)")


def _bpe_cut(rules: np.ndarray, vocab_size: int) -> int:
    """Rules kept: up to where the token count (256 + new tokens) first reaches vocab_size."""
    tokens_after = 256 + np.cumsum(_creates_token(rules))
    if vocab_size <= 256:
        return 0
    reached = np.flatnonzero(tokens_after >= vocab_size)
    return int(reached[0]) + 1 if reached.size else len(rules)


def _replay_events(rules, events, final_scaffold, vocab_size):
    """(rules kept, flags in force) at the first iteration boundary with |V| >= vocab_size.

    Vectorized (a Python loop over a 64K-rule log took 50 ms per cut): the
    normal-token count before each event is a prefix sum of per-event steps,
    and a token's flag at the cut is set by its last mark/re-admit before it.
    """
    kinds, values = events[:, 0], events[:, 1]
    _check_log(rules, kinds, values, final_scaffold)
    is_rule = kinds == EVENT_RULE
    creates = np.zeros(len(events), dtype=bool)
    creates[is_rule] = _creates_token(rules)
    steps = creates.astype(np.int64) + (kinds == EVENT_READMIT) - (kinds == EVENT_SCAFFOLD)
    normal_before = 256 + np.concatenate([[0], np.cumsum(steps)[:-1]])
    boundary = (kinds != EVENT_SCAFFOLD) & (normal_before >= vocab_size)
    cut = int(np.argmax(boundary)) if boundary.any() else len(events)
    kept = int(np.count_nonzero(is_rule[:cut]))
    n_tokens = 256 + int(np.count_nonzero(_creates_token(rules[:kept])))
    return kept, _flags_after(kinds[:cut], values[:cut], n_tokens)


def _flags_after(kinds, values, n_tokens: int) -> np.ndarray:
    """Scaffold flags after these events: each token's last mark or re-admission decides."""
    flags = np.zeros(n_tokens, dtype=bool)
    toggles = np.flatnonzero(kinds != EVENT_RULE)[::-1]
    last = toggles[np.unique(values[toggles], return_index=True)[1]]
    flags[values[last]] = kinds[last] == EVENT_SCAFFOLD
    return flags


def _creates_token(rules: np.ndarray) -> np.ndarray:
    """Whether each rule creates a token (its result is above every earlier id)."""
    results = rules[:, 2]
    return results > np.concatenate([[255], np.maximum.accumulate(results)[:-1]])


def _check_log(rules, kinds, values, final_scaffold) -> None:
    """ValueError unless the log names the rules in order, marks and re-admits tokens made
    by them, alternately, and ends at the run's final flags."""
    if np.any((kinds < EVENT_RULE) | (kinds > EVENT_READMIT)):
        raise ValueError(f"event log: unknown event kind {int(kinds[(kinds < 0) | (kinds > 2)][0])}")
    rule_values = values[kinds == EVENT_RULE]
    expected = np.arange(len(rules))
    if not np.array_equal(rule_values, expected):
        due = int(np.argmax(rule_values[:len(rules)] != expected[:rule_values.size])) \
            if rule_values.size and len(rules) else 0
        raise ValueError(f"event log: rule {int(rule_values[due]) if rule_values.size else -1} "
                         f"appended where rule {due} was due (the log names "
                         f"{rule_values.size} rules, the run has {len(rules)})")
    n_tokens = 256 + int(np.count_nonzero(_creates_token(rules)))
    toggled = np.flatnonzero(kinds != EVENT_RULE)
    tokens = values[toggled]
    if np.any((tokens < 256) | (tokens >= n_tokens)):
        raise ValueError(f"event log: token {int(tokens[(tokens < 256) | (tokens >= n_tokens)][0])}"
                         " is not a merged token of the run")
    order = np.argsort(tokens, kind="stable")
    states, tokens = kinds[toggled][order], tokens[order]
    first = np.concatenate([[True], tokens[1:] != tokens[:-1]])[:tokens.size]
    same_as_before = np.concatenate([[False], states[1:] == states[:-1]])[:tokens.size]
    if np.any(first & (states != EVENT_SCAFFOLD)) or np.any(same_as_before & ~first):
        raise ValueError("event log: a token is marked or re-admitted twice in a row")
    if final_scaffold is not None and not np.array_equal(
            _flags_after(kinds, values, n_tokens), np.asarray(final_scaffold, dtype=bool)):
        raise ValueError("event log replayed to other scaffold flags than the run's final ones")


def truncated_vocabulary(vocab, vocab_size: int, events=None):
    """A :class:`~gpubpe.model.Vocabulary` cut to ``vocab_size`` normal tokens.

    Scaffold vocabularies need the event log of their training (``events``,
    or ``metadata["scaffold_events"]`` as flat ``[kind, value, ...]``).
    """
    from .model import Vocabulary, normalizing, own_numbering

    _check_size(vocab_size)
    if vocab_size > vocab.vocab_size:
        raise ConfigError(f"vocab_size={vocab_size} is above this vocabulary's "
                          f"{vocab.vocab_size}; truncate can only cut")
    if not own_numbering(vocab):
        # Cut from the rules alone and numbered by them, GPT-2's "o" (78) came back as 111
        # (found session 28): an import keeps its source's ids.
        return _truncated_import(vocab, vocab_size)
    scaffold = vocab.scaffold is not None and bool(np.any(vocab.scaffold))
    if scaffold and events is None:
        events = vocab.metadata.get("scaffold_events")
        if events is None:
            raise ConfigError(
                "this Scaffold-BPE vocabulary carries no event log, and the scaffold flags at a "
                "smaller size are not the final ones; train at that size, or use gpubpe.sweep")
    rules, flags = cut_rules(vocab.rules, events if scaffold else None,
                             vocab.scaffold if scaffold else None, vocab_size)
    metadata = {key: value for key, value in vocab.metadata.items() if key != "scaffold_events"}
    metadata["truncated_from"] = vocab.vocab_size
    cut = Vocabulary.from_rules(rules, vocab.special_tokens, vocab.pattern, metadata, flags)
    cut = normalizing(cut, None if vocab.layout is None else vocab.layout.normalizer)
    return dataclasses.replace(cut, bitlevel_leads=vocab.bitlevel_leads, template=vocab.template)


def _truncated_import(vocab, vocab_size: int):
    """An imported vocabulary cut to ``vocab_size`` normal tokens, its source's ids kept:
    the merged tokens of the smallest ids (HF's trainer, GPT-2's files and tiktoken's
    ranks number tokens in the order training made them), and the rules among the tokens
    kept, in their order (tiktoken's rule: every split at the token's rank). Ids are the
    source's, with a gap where a token went; special tokens keep theirs."""
    from .kernels.encode.rules import all_splits
    from .model import Vocabulary

    layout = vocab.layout
    if layout.metaspace:
        raise ConfigError("truncate: a SentencePiece-style vocabulary (characters, <0xXX> byte "
                          "fallback) is not cut; train at that size instead")
    outputs = layout.output_ids
    merged = np.arange(256, outputs.size)[outputs[256:] >= 0]
    wanted = vocab_size - int(np.count_nonzero(outputs[:256] >= 0))
    first_made = merged[np.argsort(outputs[merged], kind="stable")][:wanted]
    kept = np.concatenate([np.arange(256), np.sort(first_made)])
    new_id = np.full(outputs.size, -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    token_bytes = [vocab.token_bytes[t] for t in kept.tolist()]
    if layout.rank_by_token:
        rules = all_splits(token_bytes)
    else:
        rules = new_id[vocab.rules]
        rules = rules[(rules >= 0).all(axis=1)]
    cut_layout = dataclasses.replace(layout, output_ids=outputs[kept])
    metadata = dict(vocab.metadata, truncated_from=vocab.vocab_size)
    cut = Vocabulary.from_tokens(token_bytes, rules, cut_layout, vocab.special_tokens,
                                 vocab.pattern, metadata)
    return dataclasses.replace(cut, template=vocab.template)


# ---------------------------------------------------------------- training for a sweep

# (word_counts, vocab_size, scaffold, min_frequency) -> (rules, flags or None, events or None)
Trainer = Callable[[dict, int, bool, int], tuple]


def fast_trainer(backend=None, progress: bool = False) -> Trainer:
    """The product trainer (``train_from_counts``); Scaffold runs bring their event log."""
    from .trainer import train_from_counts

    def run(word_counts, vocab_size, scaffold, min_frequency):
        result = train_from_counts(word_counts, vocab_size, min_frequency=min_frequency,
                                   scaffold=scaffold, progress=progress, backend=backend,
                                   with_events=scaffold)
        if not scaffold:
            return np.asarray(result), None, None
        (rules, flags), events = result
        return rules, flags, events

    return run


@dataclass
class Trained:
    """One vocabulary of a sweep: rules, flags, and how it was obtained."""

    variant: str
    vocab_size: int
    rules: np.ndarray
    scaffold: np.ndarray | None
    seconds_training: float  # of the run it comes from
    cut_from: int  # size of that run (== vocab_size when trained directly)


def sweep_vocabularies(word_counts: dict, vocab_sizes: Iterable[int], variant: str,
                       trainer: Trainer, min_frequency: int = 0) -> list[Trained]:
    """Every size of one variant: one run at the largest size, cut; or one run per size
    when a Scaffold trainer gives no event log."""
    sizes = sorted(set(int(s) for s in vocab_sizes))
    scaffold = _is_scaffold(variant)
    started = time.perf_counter()
    rules, flags, events = trainer(word_counts, sizes[-1], scaffold, min_frequency)
    seconds = time.perf_counter() - started
    out = [Trained(variant, sizes[-1], np.asarray(rules, np.int64).reshape(-1, 3), flags,
                   seconds, sizes[-1])]
    for size in sizes[-2::-1]:
        if scaffold and events is None:  # no log: train this size on its own
            started = time.perf_counter()
            rules_n, flags_n, _ = trainer(word_counts, size, True, min_frequency)
            out.append(Trained(variant, size, np.asarray(rules_n, np.int64).reshape(-1, 3),
                               flags_n, time.perf_counter() - started, size))
            continue
        cut, cut_flags = cut_rules(rules, events if scaffold else None,
                                   flags if scaffold else None, size)
        out.append(Trained(variant, size, cut, cut_flags, seconds, sizes[-1]))
    return out[::-1]


def _is_scaffold(variant: str) -> bool:
    if variant not in VARIANTS:
        raise ConfigError(f"variant {variant!r} is not one of {VARIANTS}")
    return variant == "scaffold"


# ---------------------------------------------------------------- the sweep


@dataclass
class SweepRow:
    """One size and variant of a sweep, measured on held-out text."""

    variant: str
    vocab_size: int
    merges: int
    scaffold_tokens: int
    scaffold_share: float  # scaffold tokens / every token of the vocabulary (E)
    seconds_training: float
    cut_from: int
    bytes_per_token: float = float("nan")
    entropy: float = float("nan")
    redundancy: float = float("nan")
    renyi_efficiency: float = float("nan")
    eval_tokens: int = 0


def sweep(counts, vocab_sizes: Iterable[int], variants: Iterable[str] = VARIANTS,
          eval_corpus=None, *, min_frequency: int = 0, alpha: float = 2.5,
          backend: str = "auto", progress: bool = True, trainer: Trainer | None = None):
    """Train every variant once at the largest size, cut the others, measure each on
    ``eval_corpus``: a list of :class:`SweepRow` (sorted by variant, then size)."""
    from .backend import resolve_training_backend
    from .counts import as_counts

    counts = as_counts(counts)
    sizes = parse_sizes(vocab_sizes)
    trainer = trainer or fast_trainer(resolve_training_backend(backend), progress)
    word_counts = counts.as_dict()
    variants = list(dict.fromkeys(variants))
    for variant in variants:  # load the JIT cache before any clock starts
        trainer({b"ab": 2}, 257, _is_scaffold(variant), 0)
    rows = []
    for variant in variants:
        for trained in sweep_vocabularies(word_counts, sizes, variant, trainer, min_frequency):
            rows.append(_measured_row(trained, counts, eval_corpus, alpha, backend))
    return rows


def _measured_row(trained: Trained, counts, eval_corpus, alpha, backend) -> SweepRow:
    from .compare import tokenization_stats
    from .model import Vocabulary
    from .tokenizer import Tokenizer

    vocab = Vocabulary.from_rules(trained.rules, counts.special_tokens, counts.pattern,
                                  scaffold=trained.scaffold)
    n_scaffold = len(vocab.scaffold_ids)
    row = SweepRow(trained.variant, vocab.vocab_size, len(trained.rules), n_scaffold,
                   n_scaffold / len(vocab.token_bytes), round(trained.seconds_training, 4),
                   trained.cut_from)
    if eval_corpus is not None:
        stats = tokenization_stats(Tokenizer(vocab, backend), eval_corpus, alpha)
        row.bytes_per_token, row.entropy = stats["bytes_per_token"], stats["entropy"]
        row.redundancy, row.renyi_efficiency = stats["redundancy"], stats["renyi_efficiency"]
        row.eval_tokens = stats["tokens"]
    return row


def parse_sizes(sizes) -> list[int]:
    """Sizes from ints or text like "4k,8k,32000" (k = 1,000; write 4096 for a power of two)."""
    if isinstance(sizes, str):
        sizes = [part for part in sizes.split(",") if part.strip()]
    parsed = []
    for size in sizes:
        text = str(size).strip().lower()
        try:
            value = int(float(text[:-1]) * 1000) if text.endswith("k") else int(text)
        except ValueError:
            raise ConfigError(f"vocabulary size {size!r} is not a number like 8000 or 8k") \
                from None
        if value <= 256:
            raise ConfigError(f"vocabulary size {value} must be above 256 (the byte tokens)")
        parsed.append(value)
    if not parsed:
        raise ConfigError("no vocabulary sizes given; e.g. --vocab-sizes 4k,8k,16k")
    return sorted(set(parsed))


def rows_table(rows: list[SweepRow]) -> str:
    """The sweep as a markdown table."""
    lines = ["| variant | vocab | merges | bytes/token | entropy | redundancy | Rényi eff. | "
             "scaffold share | training s | cut from |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.variant} | {r.vocab_size:,} | {r.merges:,} | {r.bytes_per_token:.3f} | "
                     f"{r.entropy:.4f} | {r.redundancy:.4f} | {r.renyi_efficiency:.4f} | "
                     f"{r.scaffold_share:.2%} | {r.seconds_training:.2f} | "
                     f"{'-' if r.cut_from == r.vocab_size else f'{r.cut_from:,}'} |")
    return "\n".join(lines)


def rows_json(rows: list[SweepRow]) -> str:
    return json.dumps([{k: (None if isinstance(v, float) and v != v else v)
                        for k, v in asdict(r).items()} for r in rows], indent=1)


def plot_rows(rows: list[SweepRow], path) -> None:
    """One panel per metric against vocabulary size (log scale), one line per variant."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'gpubpe[plot]'") from None
    figure, axes = plt.subplots(2, 3, figsize=(12, 6.5))
    for axis, metric in zip(axes.flat, METRICS):
        for variant in dict.fromkeys(r.variant for r in rows):
            mine = [r for r in rows if r.variant == variant]
            axis.plot([r.vocab_size for r in mine], [getattr(r, metric) for r in mine],
                      marker="o", label=variant)
        axis.set_xscale("log")
        sizes = sorted({r.vocab_size for r in rows})
        axis.set_xticks(sizes, [f"{s / 1000:g}k" for s in sizes])
        axis.minorticks_off()
        axis.set_xlabel("vocabulary size")
        axis.set_title(metric.replace("_", " "))
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
