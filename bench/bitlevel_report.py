"""The bit-level paper's Table 3 for our data: CJK text through two 32K vocabularies.

Builds the zh/ja/ko corpora from Debian's LibreOffice help packages and the
English and mixed corpora (``bench/corpora.py``), trains a 32K vocabulary on
(a) English and (b) the mix (cached in ``bench/out/``), then prints, per
corpus and vocabulary, what the codec does to byte fallbacks: the command
``gpubpe bitlevel-report`` with both lead-byte settings.

    python bench/bitlevel_report.py [--vocab-size 32000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPORA = HERE / "corpora"
OUT = HERE / "out"


def ensure_corpora(names) -> None:
    missing = [n for n in names if not (CORPORA / f"{n}.txt").exists()]
    if missing:
        subprocess.run([sys.executable, str(HERE / "corpora.py"), *missing], check=True)


def trained(name: str, vocab_size: int) -> Path:
    import gpubpe

    path = OUT / f"{name}-{vocab_size}.json"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        gpubpe.train([str(CORPORA / f"{name}.txt")], vocab_size).save(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=32000)
    args = parser.parse_args()
    ensure_corpora(["english", "zh", "ja", "ko", "mix"])
    cjk = [str(CORPORA / f"{n}.txt") for n in ("zh", "ja", "ko")]
    for vocab in ("english", "mix"):
        tokenizer = trained(vocab, args.vocab_size)
        for leads, flag in (("E0-EF", []), ("E4-EF (paper)", ["--paper-leads"])):
            print(f"\n### vocabulary: {args.vocab_size} trained on {vocab}; lead bytes {leads}\n",
                  flush=True)
            subprocess.run([sys.executable, "-m", "gpubpe", "bitlevel-report", "-t",
                            str(tokenizer), *cjk, *flag], check=True)


if __name__ == "__main__":
    main()
