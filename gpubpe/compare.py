"""Measuring tokenizations, and plain BPE against Scaffold-BPE on one corpus.

``tokenization_stats`` encodes a corpus and reports the paper's measures
(Lian et al. Tables 7-8: Shannon entropy, redundancy, bytes per token) plus
Rényi efficiency. ``compare`` trains both kinds of vocabulary at the same size
and adds the scaffold report of the paper's Figure 5: the tokens of the plain
vocabulary that Scaffold-BPE drops, and the average frequency of those
tokens (in the plain encoding) against the tokens that replace them (in the
Scaffold encoding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import metrics
from .pretokenize import iter_batches


def corpus_token_counts(tok, corpus, text_field: str = "text") -> tuple[np.ndarray, int]:
    """(int64 count of every output id, corpus bytes) over every document of a corpus."""
    counts = np.zeros(tok.n_vocab, dtype=np.int64)
    n_bytes = 0
    for batch, ids, _ in _encoded_batches(tok, corpus, text_field):
        counts += np.bincount(ids.astype(np.int64), minlength=tok.n_vocab)
        n_bytes += len(batch.data)
    return counts, n_bytes


def corpus_ids(tok, corpus, text_field: str = "text") -> tuple[np.ndarray, np.ndarray]:
    """Every document of a corpus encoded: flat uint32 ids and int64 document offsets."""
    pieces, lengths = [], []
    for _, ids, offsets in _encoded_batches(tok, corpus, text_field):
        pieces.append(ids)
        lengths.append(np.diff(offsets))
    lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.concatenate(pieces).astype(np.uint32) if pieces else np.zeros(0, np.uint32)
    return ids, offsets


def _encoded_batches(tok, corpus, text_field):
    """(batch, ids, offsets) for each batch of a corpus, special-token text as text."""
    for batch in iter_batches(corpus, text_field):
        starts = np.concatenate([[0], batch.doc_ends[:-1]]).tolist()
        documents = [batch.data[a:b] for a, b in zip(starts, batch.doc_ends.tolist())]
        encoded = tok.encode_arrays(documents, disallowed_special=())
        yield batch, np.asarray(encoded.ids), np.asarray(encoded.offsets)


def tokenization_stats(tok, corpus, alpha: float = 2.5, text_field: str = "text") -> dict:
    """Bytes/token, entropy, redundancy and Rényi efficiency of a corpus' encoding."""
    counts, n_bytes = corpus_token_counts(tok, corpus, text_field)
    return stats_from_counts(counts, n_bytes, tok.vocab_size, alpha)


def stats_from_counts(counts: np.ndarray, n_bytes: int, vocab_size: int, alpha=2.5) -> dict:
    n_tokens = int(counts.sum())
    return {
        "bytes": n_bytes,
        "tokens": n_tokens,
        "bytes_per_token": metrics.bytes_per_token(n_bytes, n_tokens),
        "entropy": metrics.shannon_entropy(counts),
        "redundancy": metrics.redundancy(counts, vocab_size),
        "renyi_efficiency": metrics.renyi_efficiency(counts, alpha, vocab_size),
        "tokens_used": int(np.count_nonzero(counts)),
        "vocab_size": vocab_size,
    }


@dataclass
class Comparison:
    """Plain BPE and Scaffold-BPE trained and measured on one corpus."""

    plain: object
    scaffold: object
    plain_stats: dict
    scaffold_stats: dict
    plain_counts: np.ndarray
    scaffold_counts: np.ndarray
    report: dict


def scaffold_report(plain, scaffold, plain_counts, scaffold_counts) -> dict:
    """Figure 5 of the paper: what Scaffold-BPE drops from a plain vocabulary, and for what."""
    plain_ids = {plain.token_bytes(i): i for i in range(plain.vocab_size)}
    scaffold_ids = {scaffold.token_bytes(i): i for i in range(scaffold.vocab_size)}
    dropped = [plain_ids[b] for b in plain_ids.keys() - scaffold_ids.keys()]
    added = [scaffold_ids[b] for b in scaffold_ids.keys() - plain_ids.keys()]
    dropped_mean = float(plain_counts[dropped].mean()) if dropped else 0.0
    added_mean = float(scaffold_counts[added].mean()) if added else 0.0
    return {
        "dropped": len(dropped),
        "dropped_share": len(dropped) / plain.vocab_size,
        "added": len(added),
        "scaffold_tokens": len(scaffold.scaffold_tokens),
        "dropped_mean_frequency": dropped_mean,
        "added_mean_frequency": added_mean,
        "frequency_gain": (added_mean / dropped_mean - 1) if dropped_mean else float("nan"),
    }


def compare(corpus, vocab_size: int, *, progress: bool = True, **train_options) -> Comparison:
    """Train plain BPE and Scaffold-BPE at ``vocab_size`` on ``corpus`` and measure both."""
    from .trainer import train

    plain = train(corpus, vocab_size, progress=progress, **train_options)
    scaffold = train(corpus, vocab_size, scaffold=True, progress=progress, **train_options)
    plain_counts, n_bytes = corpus_token_counts(plain, corpus)
    scaffold_counts, _ = corpus_token_counts(scaffold, corpus)
    return Comparison(
        plain, scaffold,
        stats_from_counts(plain_counts, n_bytes, plain.vocab_size),
        stats_from_counts(scaffold_counts, n_bytes, scaffold.vocab_size),
        plain_counts, scaffold_counts,
        scaffold_report(plain, scaffold, plain_counts, scaffold_counts),
    )


def comparison_table(result: Comparison) -> str:
    """The comparison in the shape of the paper's Tables 7-8, as markdown."""
    rows = [("Original BPE", result.plain_stats, 0.0),
            ("Scaffold-BPE", result.scaffold_stats,
             result.report["scaffold_tokens"] / len(result.scaffold.vocabulary.token_bytes))]
    lines = ["| | Entropy ↑ | Redundancy ↓ | Bytes/token ↑ | Rényi eff. (α=2.5) | scaffold share of E |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, stats, share in rows:
        lines.append(f"| {name} | {stats['entropy']:.4f} | {stats['redundancy']:.4f} | "
                     f"{stats['bytes_per_token']:.3f} | {stats['renyi_efficiency']:.4f} | "
                     f"{share:.2%} |")
    report = result.report
    lines.append("")
    lines.append(f"Scaffold-BPE drops {report['dropped']} tokens of the plain vocabulary "
                 f"({report['dropped_share']:.2%}); their mean frequency "
                 f"{report['dropped_mean_frequency']:.1f} vs {report['added_mean_frequency']:.1f} "
                 f"for the tokens replacing them ({report['frequency_gain']:+.1%}).")
    return "\n".join(lines)


def plot_frequencies(result: Comparison, path) -> None:
    """Sorted token-frequency curves of both vocabularies (the paper's Figure 2) to a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from .errors import ConfigError

        raise ConfigError("--plot needs matplotlib: pip install 'gpubpe[plot]'") from None
    figure, axes = plt.subplots(figsize=(7, 4))
    for name, counts in (("Original BPE", result.plain_counts),
                         ("Scaffold-BPE", result.scaffold_counts)):
        sorted_counts = np.sort(counts[counts > 0])[::-1]
        axes.loglog(np.arange(1, sorted_counts.size + 1), sorted_counts, label=name)
    axes.set_xlabel("token rank")
    axes.set_ylabel("frequency in the corpus")
    axes.set_title(f"Token frequencies, |V| = {result.plain.vocab_size}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
