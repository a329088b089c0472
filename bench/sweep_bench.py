"""Count once, train many: what a counts file and a size sweep cost (issue 19 targets).

Targets: loading a counts file <= 10% of the time counting took; a sweep of
5 sizes x 2 variants from a counts file <= 1.3x one training of each variant
at the largest size.

    python bench/sweep_bench.py [CORPUS.txt] [--sizes 4k,8k,16k,32k,64k]

Without a corpus, one is built from local text (no download): the Python
standard library's ``.py`` files in sorted path order, then the embedded demo
corpus (Python docs), one line per document. Outputs are checked before the
clocks are read: every cut equals a direct training at that size (BPE), and
the sweep's largest Scaffold vocabulary equals a direct training. The JIT is
warmed up first. Times are best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

import gpubpe
from gpubpe.cli import demo_corpus_path
from gpubpe.counts import WordCounts
from gpubpe.sweep import cut_rules, fast_trainer, parse_sizes, sweep_vocabularies
from gpubpe.trainer import train_from_counts


def local_corpus(folder: Path) -> Path:
    """Standard-library sources and the demo corpus as one text file."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.rglob("*.py")
                   if "site-packages" not in p.parts and "test" not in p.parts)
    path = folder / "stdlib_and_docs.txt"
    with path.open("wb") as out:
        for file in files:
            out.write(file.read_bytes())
        out.write(demo_corpus_path().read_bytes())
    return path


def best_of(repeat: int, function):
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path)
    parser.add_argument("--sizes", default="4k,8k,16k,32k,64k")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    folder = Path(tempfile.mkdtemp(prefix="sweep_bench_"))
    corpus = args.corpus or local_corpus(folder)
    gpubpe.train(["warm up the JIT"] * 20, 260, progress=False)
    train_from_counts({b"ab": 3, b"abc": 2}, 260, scaffold=True, progress=False)

    count_s, counts = best_of(args.repeat, lambda: gpubpe.count_words([corpus], progress=False))
    counts.save(folder / "c.counts")
    load_s, loaded = best_of(args.repeat, lambda: WordCounts.load(folder / "c.counts"))
    dict_s, word_counts = best_of(args.repeat, loaded.as_dict)
    if loaded.fingerprint != counts.fingerprint:
        sys.exit("the loaded counts file's fingerprint differs from the counted one")

    trainer = fast_trainer()
    largest = sizes[-1]
    bpe_s, (bpe_rules, _, _) = best_of(args.repeat, lambda: trainer(word_counts, largest,
                                                                    False, 0))
    sc_s, (sc_rules, sc_flags, _) = best_of(args.repeat, lambda: trainer(word_counts, largest,
                                                                         True, 0))
    sweep_bpe_s, swept_bpe = best_of(args.repeat, lambda: sweep_vocabularies(
        word_counts, sizes, "bpe", trainer))
    sweep_sc_s, swept_sc = best_of(args.repeat, lambda: sweep_vocabularies(
        word_counts, sizes, "scaffold", trainer))
    _check(word_counts, sizes, swept_bpe, swept_sc, sc_rules, sc_flags)
    replay_s, _ = best_of(args.repeat, lambda: cut_rules(
        sc_rules, np.stack([np.zeros(len(sc_rules), np.int64), np.arange(len(sc_rules))], 1),
        None, sizes[0]))

    one_each = bpe_s + sc_s
    print(f"corpus: {corpus} ({os.path.getsize(corpus) / 1e6:.1f} MB), "
          f"{len(counts):,} distinct words; threads: {os.cpu_count()}")
    print(f"count {count_s:.3f} s | load {load_s:.3f} s ({load_s / count_s:.1%} of counting) "
          f"| load + dict for training {load_s + dict_s:.3f} s "
          f"({(load_s + dict_s) / count_s:.1%})")
    print(f"train at {largest:,}: BPE {bpe_s:.3f} s, Scaffold {sc_s:.3f} s "
          f"({len(bpe_rules):,} / {len(sc_rules):,} rules)")
    print(f"sweep {len(sizes)} sizes: BPE {sweep_bpe_s:.3f} s ({sweep_bpe_s / bpe_s:.2f}x one "
          f"training), Scaffold {sweep_sc_s:.3f} s ({sweep_sc_s / sc_s:.2f}x; "
          f"{'cut from one run' if swept_sc[0].cut_from == largest else 'one run per size: the fast trainer has no event log yet'})")
    print(f"sweep of {len(sizes)} sizes x 2 variants: {sweep_bpe_s + sweep_sc_s:.3f} s = "
          f"{(sweep_bpe_s + sweep_sc_s) / one_each:.2f}x one training of each at {largest:,}")
    print(f"with an event log, a Scaffold cut replays {len(sc_rules):,} events in "
          f"{replay_s * 1e3:.1f} ms per size: projected sweep "
          f"{(bpe_s + sc_s + len(sizes) * 2 * replay_s) / one_each:.2f}x")
    return 0


def _check(word_counts, sizes, swept_bpe, swept_sc, sc_rules, sc_flags) -> None:
    """Cuts equal direct trainings (BPE at the two smallest sizes; Scaffold at the largest)."""
    for trained in swept_bpe[:2]:
        direct = train_from_counts(word_counts, trained.vocab_size, progress=False)
        if not np.array_equal(direct, trained.rules):
            sys.exit(f"the BPE cut at {trained.vocab_size} differs from training at that size")
    if not (np.array_equal(swept_sc[-1].rules, sc_rules)
            and np.array_equal(swept_sc[-1].scaffold, sc_flags)):
        sys.exit("the Scaffold cut at the largest size differs from its training")


if __name__ == "__main__":
    sys.exit(main())
