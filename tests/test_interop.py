"""Interop with tools no one here wrote: HF tokenizers / transformers, GPT-2 files, tiktoken.

Vocabularies are trained on a quarter of ``tests/data/multiscript.txt`` (English,
code, Chinese, Japanese, Korean, emoji); the id parity checks encode all of it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import interop
from gpubpe._reference import gpt2_byte_to_unicode
from gpubpe.errors import ConfigError, ModelFormatError
from gpubpe.model import Vocabulary
from gpubpe.pretokenize import split_words

tokenizers = pytest.importorskip("tokenizers", reason="interop tests need the 'dev' extra")
tiktoken = pytest.importorskip("tiktoken", reason="interop tests need the 'dev' extra")
HfTokenizer = tokenizers.Tokenizer

CORPUS = Path(__file__).parent / "data" / "multiscript.txt"
SPECIALS = ["<|endoftext|>", "<pad>"]
# A custom pattern that matches all text, and one that skips what it does not match.
COVERING = r"\p{L}+|\p{N}+|[^\p{L}\p{N}]+"
SKIPPING = r"\p{L}+|\p{N}"


@pytest.fixture(scope="module")
def documents() -> list[bytes]:
    # bytes, not str: gpubpe.train reads a str holding "/" and no newline as a path.
    return CORPUS.read_bytes().splitlines(keepends=True)


@pytest.fixture(scope="module")
def text() -> str:
    return CORPUS.read_text(encoding="utf-8")


@pytest.fixture(scope="module", params=["gpt2", "cl100k", "o200k", "llama3", COVERING])
def trained(request, documents) -> gpubpe.Tokenizer:
    return gpubpe.train(documents[::4], 3000, pattern=request.param, special_tokens=SPECIALS,
                        progress=False)


@pytest.fixture(scope="module")
def gpt2_trained(documents) -> gpubpe.Tokenizer:
    return gpubpe.train(documents[::4], 3000, special_tokens=SPECIALS, progress=False)


def hf_from(vocab: Vocabulary, folder: Path) -> HfTokenizer:
    """Export to a file and load it as HF does."""
    path = folder / "tokenizer.json"
    interop.save_hf(vocab, path)
    return HfTokenizer.from_file(str(path))


def rules_from(pairs: list[tuple[bytes, bytes]]) -> Vocabulary:
    """A vocabulary from byte-string rules in rank order (results looked up or created)."""
    ids = {bytes([b]): b for b in range(256)}
    rules = []
    for left, right in pairs:
        rules.append((ids[left], ids[right], ids.setdefault(left + right, len(ids))))
    return Vocabulary.from_rules(rules, pattern=None)


# ---------------------------------------------------------------- export: HF


def test_hf_export_gives_gpubpe_ids(trained, text, tmp_path):
    hf = hf_from(trained.vocabulary, tmp_path)
    assert hf.encode(text).ids == trained.encode(text)


def test_hf_export_pre_tokenizer(trained):
    pre_tokenizer = interop.to_hf_json(trained.vocabulary)["pre_tokenizer"]
    if trained.vocabulary.pattern == "gpt2":  # HF's ByteLevel regex is GPT-2's
        assert pre_tokenizer == {"type": "ByteLevel", "add_prefix_space": False,
                                 "trim_offsets": True, "use_regex": True}
    else:
        split, byte_level = pre_tokenizer["pretokenizers"]
        assert split["type"] == "Split" and byte_level["use_regex"] is False


def test_hf_export_decodes_back(gpt2_trained, text, tmp_path):
    hf = hf_from(gpt2_trained.vocabulary, tmp_path)
    sample = text[:200_000]
    assert hf.decode(hf.encode(sample).ids) == sample


def test_pattern_that_skips_text_is_exported_as_removed_split(documents, tmp_path):
    # gpubpe (like tiktoken) keeps only the pattern's matches: " " and "," vanish.
    tok = gpubpe.train(documents[::8], 1000, pattern=SKIPPING, progress=False)
    split = interop.to_hf_json(tok.vocabulary)["pre_tokenizer"]["pretokenizers"][0]
    assert (split["behavior"], split["invert"]) == ("Removed", True)
    sample = "hello, world 12 中文"
    words = ["hello", "world", "1", "2", "中文"]
    assert tok.encode(sample) == [i for word in words for i in tok.encode(word)]
    hf = hf_from(tok.vocabulary, tmp_path)
    assert hf.encode(sample).ids == tok.encode(sample)
    assert interop.to_tiktoken(tok.vocabulary).encode_ordinary(sample) == tok.encode(sample)


def test_vocabulary_without_pattern_exports(documents, tmp_path):
    # No pattern: each text is one word; HF gets ByteLevel without its regex.
    tok = gpubpe.train(documents[::40], 600, pattern=None, progress=False)
    assert interop.to_hf_json(tok.vocabulary)["pre_tokenizer"]["use_regex"] is False
    sample = b"".join(documents[:300]).decode("utf-8")
    ids = tok.encode(sample)
    assert hf_from(tok.vocabulary, tmp_path).encode(sample).ids == ids
    assert interop.to_tiktoken(tok.vocabulary).encode_ordinary(sample) == ids
    assert interop.from_hf(tmp_path / "tokenizer.json").pattern is None


def test_pattern_hf_reads_otherwise_is_refused():
    # Oniguruma reads "{1,3}+" as "(...{1,3})+": HF would split "12345" as one word.
    vocab = Vocabulary.from_rules([], pattern=r"\p{N}{1,3}+|\D+")
    with pytest.raises(ConfigError, match="possessive counted repeat"):
        interop.to_hf_json(vocab)


def test_special_tokens_through_hf_and_tiktoken(gpt2_trained, tmp_path):
    sample = "<|endoftext|>Hello 世界<pad><pad> x<|endoftext|>"
    ours = gpt2_trained.encode(sample, allowed_special="all")
    assert ours[0] == gpt2_trained.vocab_size and ours[-1] == gpt2_trained.vocab_size
    hf = hf_from(gpt2_trained.vocabulary, tmp_path)
    assert hf.encode(sample).ids == ours
    assert hf.decode(ours, skip_special_tokens=False) == sample
    encoding = interop.to_tiktoken(gpt2_trained.vocabulary)
    assert encoding.encode(sample, allowed_special="all") == ours
    assert encoding.decode(ours) == sample


def test_transformers_fast_tokenizer_loads_export(gpt2_trained, text, tmp_path):
    transformers = pytest.importorskip("transformers", reason="loading the export in HF needs the 'dev' extra")
    path = tmp_path / "tokenizer.json"
    interop.save_hf(gpt2_trained.vocabulary, path)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    sample = text[:100_000] + "<|endoftext|>"
    ours = gpt2_trained.encode(sample, allowed_special="all")
    assert fast.encode(sample, add_special_tokens=False) == ours
    assert fast.decode(ours) == sample


def test_repeated_pair_keeps_first_rank_in_export(tmp_path):
    # Rules: 0 (b,c)->bc  1 (a,b)->ab  2 (b,c) again (dead in gpubpe: the pair keeps rank 0).
    # HF would give the pair its last rank (2), so "abc" would become [ab, c]; the
    # export drops the dead copy and HF gives gpubpe's [a, bc].
    vocab = rules_from([(b"b", b"c"), (b"a", b"b"), (b"b", b"c")])
    hf = hf_from(vocab, tmp_path)
    assert interop.to_hf_json(vocab)["model"]["merges"] == ["b c", "a b"]
    assert gpubpe.Tokenizer(vocab).encode("abc") == [97, 256] == hf.encode("abc").ids


def test_hf_gives_repeated_pair_its_last_rank_on_import():
    # The same three merges written by hand: HF ranks (b,c) last, so "abc" -> [ab, c].
    data = {
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": False},
        "model": {"type": "BPE", "vocab": {**{chr(b): b for b in range(97, 100)},
                                           "bc": 3, "ab": 4},
                  "merges": ["b c", "a b", "b c"]},
    }
    hf = HfTokenizer.from_str(json.dumps(data))
    assert hf.encode("abc").tokens == ["ab", "c"]
    vocab = interop.from_hf(data)
    # Internal ids: bytes, then bc (HF 3) = 256, ab (HF 4) = 257; the earlier (b, c) is dropped.
    assert [tuple(r) for r in vocab.rules.tolist()] == [(97, 98, 257), (98, 99, 256)]
    assert gpubpe.Tokenizer(vocab).encode("abc") == hf.encode("abc").ids == [4, 99]


# ---------------------------------------------------------------- rank of the rule vs of the token


def test_rule_to_existing_token_hf_agrees_tiktoken_differs(tmp_path):
    # ids: a=97 b=98 c=99 d=100. Rules (rank: pair -> result):
    #   0: a b -> ab (256)   1: b c -> bc (257)   2: a bc -> abc (258)
    #   3: c d -> cd (259)   4: ab c -> abc (258, existing token)
    # "abcd" by rules (gpubpe, HF): a b c d -> rank 0: ab c d -> rank 3 beats rank 4: ab cd.
    # tiktoken ranks tokens: a b c d -> ab (256) c d -> ab+c is abc (258) < cd (259): abc d.
    vocab = rules_from([(b"a", b"b"), (b"b", b"c"), (b"a", b"bc"), (b"c", b"d"), (b"ab", b"c")])
    assert vocab.rules[4].tolist() == [256, 99, 258]
    ours = gpubpe.Tokenizer(vocab).encode("abcd")
    assert ours == [256, 259] == hf_from(vocab, tmp_path).encode("abcd").ids
    assert interop.to_tiktoken(vocab).encode_ordinary("abcd") == [258, 100]


def test_token_its_bytes_do_not_reach_tiktoken_reaches():
    # Rules: 0: b c -> bc (256)   1: a b -> ab (257)   2: ab c -> abc (258).
    # "abc" by rules: rank 0 first: a bc, and no rule joins a + bc: [97, 256].
    # tiktoken: "abc" is a token, returned whole: [258]; inside "abcd" it joins
    # a + bc (abc has rank 258), a pair that is no rule: [258, 100].
    vocab = rules_from([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")])
    tok = gpubpe.Tokenizer(vocab)
    encoding = interop.to_tiktoken(vocab)
    assert tok.encode("abc") == [97, 256] and encoding.encode_ordinary("abc") == [258]
    assert tok.encode("abcd") == [97, 256, 100] and encoding.encode_ordinary("abcd") == [258, 100]
    # Importing the ranks recovers the merge tiktoken follows: abc = a + bc.
    imported = interop.from_tiktoken(encoding)
    assert imported.rules[2].tolist() == [97, 256, 258]
    assert gpubpe.Tokenizer(imported).encode("abcd") == [258, 100]


# ---------------------------------------------------------------- tiktoken


def test_tiktoken_export_gives_gpubpe_ids(trained, text):
    encoding = interop.to_tiktoken(trained.vocabulary)
    assert encoding.encode_ordinary(text) == trained.encode_ordinary(text)
    assert encoding.n_vocab == trained.n_vocab


def test_tiktoken_round_trip_keeps_ids(gpt2_trained, text):
    vocab = gpt2_trained.vocabulary
    back = interop.from_tiktoken(interop.to_tiktoken(vocab))
    assert back.token_bytes == vocab.token_bytes and back.vocab_size == vocab.vocab_size
    assert (back.special_tokens, back.pattern) == (vocab.special_tokens, "gpt2")
    sample = text[:30_000]
    assert gpubpe.Tokenizer(back).encode(sample) == gpt2_trained.encode(sample)


def test_tiktoken_ranks_in_gpt2_byte_order_keep_their_ids(gpt2_trained, text):
    # r50k-style ranks: bytes numbered in GPT-2's character order ("!" is 0), then merges.
    vocab = gpt2_trained.vocabulary
    byte_order = list(gpt2_byte_to_unicode())
    ranks = {bytes([byte]): rank for rank, byte in enumerate(byte_order)}
    ranks.update({piece: i for i, piece in enumerate(vocab.token_bytes) if i >= 256})
    encoding = tiktoken.Encoding("r50k-like", pat_str=interop.TIKTOKEN_GPT2_PATTERN,
                                 mergeable_ranks=ranks, special_tokens={})
    imported = interop.from_tiktoken(encoding)
    assert imported.pattern == "gpt2" and imported.byte_ids().tolist()[ord("!")] == 0
    sample = text[:50_000]
    assert encoding.encode_ordinary(sample) == gpubpe.Tokenizer(imported).encode_ordinary(sample)


def test_tiktoken_token_reachable_only_whole():
    # "abcd" is no merge of two tokens (abc, cd and bcd are none): tiktoken reaches it only
    # as a whole piece; inside "xabcd" it merges b+c and stops: [x, a, bc, d].
    ranks = {bytes([b]): b for b in range(256)} | {b"bc": 256, b"abcd": 257}
    encoding = tiktoken.Encoding("odd", pat_str=r"\S+|\s+", mergeable_ranks=ranks,
                                 special_tokens={})
    tok = gpubpe.Tokenizer(interop.from_tiktoken(encoding))
    for sample in ("abcd", "xabcd", "abcd abcdabcd bc"):
        assert tok.encode(sample) == encoding.encode_ordinary(sample)
    assert tok.encode("abcd") == [257] and tok.encode("xabcd") == [120, 97, 256, 100]


# ---------------------------------------------------------------- import: HF


def test_hf_round_trip(trained, text, tmp_path):
    path = tmp_path / "tokenizer.json"
    interop.save_hf(trained.vocabulary, path)
    back = interop.from_hf(path)
    vocab = trained.vocabulary
    assert np.array_equal(back.rules, vocab.rules)
    assert (back.special_tokens, back.pattern) == (vocab.special_tokens, vocab.pattern)
    assert interop.hf_id_map(path) == {i: i for i in range(trained.n_vocab)}
    sample = text[::7]
    ids = gpubpe.Tokenizer(back).encode(sample)
    assert ids == trained.encode(sample)
    assert gpubpe.Tokenizer(back).decode(ids) == sample


def test_import_hf_trained_tokenizer(documents, text):
    # HF's BpeTrainer numbers special tokens first and bytes by code point:
    # gpubpe renumbers, and hf_id_map translates HF's ids.
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator((d.decode("utf-8") for d in documents[::4]), trainer)
    vocab = interop.from_hf(hf.to_str())
    assert vocab.special_tokens == SPECIALS and vocab.vocab_size == 2000 - len(SPECIALS)
    assert vocab.special_ids()[SPECIALS[0]] == 0 and vocab.byte_ids()[32] == hf.token_to_id("Ġ")
    tok = gpubpe.Tokenizer(vocab)
    sample = text[::5] + "<pad>"
    assert hf.encode(sample).ids == tok.encode(sample, allowed_special="all")
    assert tok.decode(tok.encode(sample, allowed_special="all")) == sample


def test_added_tokens_hf_does_not_call_special_are_matched_always(documents, text, tmp_path):
    """HF matches every added token in text; one with ``special: false`` (a run of spaces, as
    CodeGen's; a letter, as DeepSeek Coder's "ö") is no special token, so the default
    ``encode`` neither raises on it nor spells it out; a special one still raises."""
    from tokenizers import AddedToken, models, pre_tokenizers, trainers

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator((d.decode("utf-8") for d in documents[::8]), trainer)
    hf.add_tokens([AddedToken("    ", normalized=False), AddedToken("ö", normalized=False)])
    hf.add_special_tokens(["<|end|>"])
    tok = gpubpe.Tokenizer.from_hf(hf.to_str())
    sample = "def f():\n    return 'Malmö'\n" + text[:300]
    assert tok.encode(sample) == tok.encode(sample, disallowed_special=()) == \
        hf.encode(sample, add_special_tokens=False).ids
    with pytest.raises(gpubpe.errors.SpecialTokenError, match="<|end|>"):
        tok.encode(sample + "<|end|>")
    tok.save(tmp_path / "tok.json")
    again = gpubpe.load(tmp_path / "tok.json")
    assert again.encode(sample) == tok.encode(sample)
    exported = HfTokenizer.from_str(json.dumps(again.to_hf_json()))
    assert [t.special for t in exported.get_added_tokens_decoder().values()] == \
        [False, False, True]


def test_from_hf_reads_path_text_and_dict(gpt2_trained, tmp_path):
    path = tmp_path / "tokenizer.json"
    interop.save_hf(gpt2_trained.vocabulary, path)
    from_text = interop.from_hf(path.read_text(encoding="utf-8"))
    from_dict = interop.from_hf(json.loads(path.read_text(encoding="utf-8")))
    from_path = interop.from_hf(str(path))
    assert np.array_equal(from_text.rules, from_dict.rules)
    assert np.array_equal(from_text.rules, from_path.rules)


@pytest.mark.parametrize("model_type", ["WordPiece", "Unigram", "WordLevel"])
def test_unsupported_model_type_is_named(model_type):
    from tokenizers import models

    model = {
        "WordPiece": lambda: models.WordPiece({"a": 0, "[UNK]": 1}, unk_token="[UNK]"),
        "Unigram": lambda: models.Unigram([("a", -1.0)]),
        "WordLevel": lambda: models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"),
    }[model_type]()
    with pytest.raises(ModelFormatError, match=model_type):
        interop.from_hf(HfTokenizer(model).to_str())


def test_bpe_without_byte_level_is_refused():
    from tokenizers import models, pre_tokenizers

    hf = HfTokenizer(models.BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")]))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ModelFormatError, match="Whitespace"):
        interop.from_hf(hf.to_str())


def test_strict_import_refuses_normalizer_unless_asked(gpt2_trained):
    data = interop.to_hf_json(gpt2_trained.vocabulary)
    data["normalizer"] = {"type": "Lowercase"}
    with pytest.raises(ModelFormatError, match="Lowercase.*NFKC, NFKD.*strict=False"):
        interop.from_hf(data)
    vocab = interop.from_hf(data, strict=False)
    assert "Lowercase" in vocab.metadata["hf_import_notes"][0]


def test_merge_of_a_token_made_later_works_as_in_hf():
    data = {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4},
                      "merges": [["ab", "c"], ["a", "b"]]}}
    hf = HfTokenizer.from_str(json.dumps(data))
    tok = gpubpe.Tokenizer(interop.from_hf(data))
    for sample in ("abc", "abcab", "cab"):
        assert tok.encode(sample) == hf.encode(sample).ids
    assert tok.encode("abc") == [4]


def test_merge_of_a_token_not_in_the_vocab_is_refused():
    data = {"pre_tokenizer": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}}
    with pytest.raises(ModelFormatError, match="merge 0.*'ab'.*not in model.vocab"):
        interop.from_hf(data)


def test_split_isolated_custom_pattern_keeps_the_gaps():
    # HF's Isolated split keeps text between matches as words; the import says so in its pattern.
    data = {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SKIPPING}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": False}]},
        "model": {"type": "BPE", "vocab": {}, "merges": []},
    }
    vocab = interop.from_hf(data)
    hf = HfTokenizer.from_str(json.dumps(data))
    sample = "hello, world 12 !"
    pieces = [interop.hf_to_token(p).decode() for p, _ in hf.pre_tokenizer.pre_tokenize_str(sample)]
    assert split_words(sample, vocab.pattern) == pieces


def test_import_refuses_split_python_reads_otherwise():
    # The same "{1,3}+" trap, the other way: HF takes "1234567" whole, Python's regex "123".
    split = {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}+|\D+"}, "behavior": "Isolated",
             "invert": False}
    data = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                split, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": False}]},
            "model": {"type": "BPE", "vocab": {}, "merges": []}}
    with pytest.raises(ModelFormatError, match="1234567"):
        interop.from_hf(data)
    assert "1234567" in interop.from_hf(data, strict=False).metadata["hf_import_notes"][0]


# ---------------------------------------------------------------- GPT-2 files


def test_gpt2_files_import(gpt2_trained, text, tmp_path):
    # GPT-2's files: bytes numbered in GPT-2's character order, merges after, then <|endoftext|>.
    vocab = gpt2_trained.vocabulary
    chars = gpt2_byte_to_unicode()
    gpt2_ids = {chars[byte]: rank for rank, byte in enumerate(chars)}
    merged = enumerate(vocab.token_bytes[256:], 256)
    gpt2_ids.update({interop.token_to_hf(piece): i for i, piece in merged})
    gpt2_ids["<|endoftext|>"] = len(gpt2_ids)
    merges = interop.to_hf_json(vocab)["model"]["merges"]
    (tmp_path / "vocab.json").write_text(json.dumps(gpt2_ids), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                         encoding="utf-8")

    imported = interop.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert np.array_equal(imported.rules, vocab.rules)
    assert imported.special_tokens == ["<|endoftext|>"] and imported.pattern == "gpt2"
    assert imported.special_ids() == {"<|endoftext|>": gpt2_ids["<|endoftext|>"]}
    # HF reads the same files and gives the same ids.
    from tokenizers import models, pre_tokenizers

    hf = HfTokenizer(models.BPE.from_file(str(tmp_path / "vocab.json"),
                                          str(tmp_path / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    sample = text[::9]
    assert hf.encode(sample).ids == gpubpe.Tokenizer(imported).encode(sample)


# ---------------------------------------------------------------- refusals and properties


def test_scaffold_vocabulary_is_not_exported(gpt2_trained):
    vocab = dataclasses.replace(
        gpt2_trained.vocabulary,
        demolish_ids=np.arange(3000, dtype=np.uint32),
        demolish_offsets=np.arange(3001, dtype=np.int64),
    )
    with pytest.raises(ConfigError, match="Scaffold"):
        interop.to_hf_json(vocab)
    with pytest.raises(ConfigError, match="Scaffold"):
        interop.to_tiktoken(vocab)


@pytest.fixture(scope="module")
def three_encoders(gpt2_trained, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    return gpt2_trained, hf_from(gpt2_trained.vocabulary, folder), interop.to_tiktoken(
        gpt2_trained.vocabulary)


CORPUS_CHARS = sorted(set(CORPUS.read_text(encoding="utf-8")))


@given(st.text(alphabet=st.sampled_from(CORPUS_CHARS), max_size=80).filter(
    lambda sample: not any(special in sample for special in SPECIALS)))
def test_random_text_same_ids_in_all_three(three_encoders, sample):
    ours, hf, encoding = three_encoders
    ids = ours.encode(sample)
    assert hf.encode(sample).ids == ids == encoding.encode_ordinary(sample)
    assert ours.decode(ids) == hf.decode(ids) == sample


def test_hf_token_strings_map_to_bytes_and_foreign_characters_are_named():
    from gpubpe.bytes_order import BYTE_TO_CHAR
    from gpubpe.interop import hf_to_token

    assert hf_to_token("".join(BYTE_TO_CHAR)) == bytes(range(256))
    assert hf_to_token("Ġthe") == b" the"
    for text, bad in (("Ġthe\u20ac", "\u20ac"), ("a\x00", "\x00"), ("x\u0144", "\u0144")):
        with pytest.raises(ModelFormatError, match=re.escape(f"holds {bad!r}")):
            hf_to_token(text)


@pytest.mark.parametrize("merge", [["a", "b", "c"], ["a", 5], "a b c", 7, ["a", ""]])
def test_a_malformed_merge_is_named(merge):
    data = {"pre_tokenizer": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                      "merges": [["a", "b"], merge]}}
    with pytest.raises(ModelFormatError, match=r"merge 1 is .*; expected 'a b' or \[a, b\]"):
        interop.from_hf(data)


@given(st.lists(st.binary(min_size=2, max_size=24), max_size=60, unique=True))
def test_every_split_of_every_token_equals_the_python_oracle(tokens):
    # Short parts are their own keys, parts of 8 bytes on go through the hash and a byte
    # compare; tokens built from others (prefixes of each other) have many splits.
    from gpubpe._reference import all_splits as reference_splits
    from gpubpe.kernels.encode.rules import all_splits

    grown = tokens + [a + b for a, b in zip(tokens, tokens[1:]) if a + b not in tokens]
    token_bytes = [bytes([b]) for b in range(256)] + list(dict.fromkeys(grown))
    rules = all_splits(token_bytes)
    assert rules.dtype == np.int64 and rules.shape[1] == 3
    assert list(map(tuple, rules.tolist())) == reference_splits(token_bytes)


def test_every_split_of_cl100k_equals_the_python_oracle(cl100k):
    from gpubpe._reference import all_splits as reference_splits

    token_bytes, _ = interop._tokens_by_rank(cl100k._mergeable_ranks, "cl100k")
    rules = interop.vocabulary_from_ranks(cl100k._mergeable_ranks, None, {}, {}).rules
    assert len(rules) == 233_378
    assert list(map(tuple, rules.tolist())) == reference_splits(token_bytes)
