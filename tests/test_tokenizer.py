"""Tokenizer: encode equals the reference, round trips, files, introspection, errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference
from gpubpe.errors import ModelFormatError, SpecialTokenError


@pytest.fixture(scope="module")
def tok():
    docs = ["the quick brown fox jumps over the lazy dog", "aaaa aaa aa", "中文 中文字符 😀😀",
            "hello world, hello there", "ab" * 50] * 4
    return gpubpe.train(docs, 320, special_tokens=["<|endoftext|>"], progress=False)


def reference_ids(tok, text: str) -> list[int]:
    rules = [tuple(r) for r in tok.vocabulary.rules.tolist()]
    ids = []
    for word in _words_in_order(text):
        ids.extend(_reference.encode_word(word, rules))
    return ids


def _words_in_order(text):
    import regex

    from gpubpe.pretokenize import GPT2_PATTERN, word_bytes
    return [word_bytes(w) for w in regex.findall(GPT2_PATTERN, text)]


@given(st.text(max_size=60))
def test_encode_equals_reference_and_round_trips(tok, text):
    text = text.replace("\ud800", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    ids = tok.encode(text, disallowed_special=())
    assert ids == reference_ids(tok, text)
    assert tok.decode(ids) == text


@given(st.binary(max_size=80))
def test_bytes_round_trip(tok, data):
    assert tok.decode_bytes(tok.encode(data, disallowed_special=())) == data


def test_golden_encoding(tok):
    # "aaaa" as a word: rules for (a,a) and (aa,aa) exist, so it is one token.
    assert len(tok.encode("aaaa")) == 1
    assert tok.encode("") == []


def test_special_tokens(tok):
    eot = tok.special_tokens["<|endoftext|>"]
    assert eot == tok.vocab_size
    assert tok.encode("hi<|endoftext|>", allowed_special="all")[-1] == eot
    with pytest.raises(SpecialTokenError, match="endoftext"):
        tok.encode("hi<|endoftext|>")
    ordinary = tok.encode("<|endoftext|>", disallowed_special=())
    assert eot not in ordinary and tok.decode(ordinary) == "<|endoftext|>"
    assert tok.decode([eot]) == "<|endoftext|>"


def test_introspection(tok):
    assert tok.vocab_size == 320
    assert tok.n_vocab == 321
    assert tok.token_bytes(97) == b"a"
    assert all(tok.token_bytes(256 + i) == a + b for i, (a, b) in enumerate(tok.merges[:5]))


def test_decode_rejects_foreign_ids(tok):
    with pytest.raises(ValueError, match="id 99999 at position 1"):
        tok.decode([1, 99999])


def test_save_load_gives_identical_encodings(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    loaded = gpubpe.load(path)
    text = "the lazy 中文 hello<|endoftext|> aaaa"
    assert loaded.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    assert loaded.merges == tok.merges
    assert json.loads(path.read_text())["format"] == "gpubpe/1"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp file left"


def test_corrupt_files_give_clear_errors(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    text = path.read_text()
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) // 2])
    with pytest.raises(ModelFormatError, match="corrupt or truncated"):
        gpubpe.load(truncated)
    foreign = tmp_path / "hf.json"  # a HF file is imported: its errors name it
    foreign.write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    with pytest.raises(ModelFormatError, match="hf.json: pre-tokenizer is None; a byte-level"):
        gpubpe.load(foreign)
    data = json.loads(text)
    data["merges"][3][2] = 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ModelFormatError, match="rule 3"):
        gpubpe.load(bad)
    with pytest.raises(ModelFormatError, match="no such"):
        gpubpe.load(tmp_path / "missing.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ModelFormatError, match="not UTF-8"):
        gpubpe.load(binary)


@pytest.mark.parametrize("form", ["uint32 batch", "int64 batch", "lists"])
@pytest.mark.parametrize("errors", ["replace", "surrogateescape"])
def test_decode_batch_equals_per_document_decoding_of_any_ids(tok, form, errors):
    """Random ids (invalid UTF-8 among them) cut into documents at random places, so that
    characters are split between documents: each document decodes as tiktoken's bytes of
    its ids, decoded by Python with the same errors; uint32, int64 and list input alike."""
    import numpy as np

    from gpubpe.interop import to_tiktoken
    from gpubpe.tokenizer import RaggedBatch

    encoding = to_tiktoken(tok._vocab)
    rng = np.random.default_rng(len(form) + len(errors))
    text_ids = tok.encode("中文字符 😀 the lazy dog " * 5)
    ids = np.concatenate([text_ids, rng.integers(0, tok.vocab_size, 400), text_ids])
    documents = np.split(ids, np.sort(rng.integers(0, ids.size, 60)))  # some empty
    expected = [encoding.decode_bytes(d.tolist()).decode("utf-8", errors) for d in documents]
    stand_ins = {"\ufffd"} | {chr(c) for c in range(0xDC80, 0xDD00)}
    assert any(stand_ins & set(e) for e in expected)  # invalid UTF-8 was met
    offsets = np.cumsum([0] + [d.size for d in documents])
    batch = {"uint32 batch": RaggedBatch(ids.astype(np.uint32), offsets),
             "int64 batch": RaggedBatch(ids.astype(np.int64), offsets),
             "lists": [d.tolist() for d in documents]}[form]
    assert tok.decode_batch(batch, errors=errors) == expected


# ---------------------------------------------------------------- encode()'s short texts


@pytest.fixture
def quick_calls(tok, monkeypatch):
    """The calls ``tok.encode()`` made to the one-kernel path of short texts (the kernel
    through its dispatcher, not the compiled entry ``_compiled_entry`` finds)."""
    from gpubpe import tokenizer as module

    calls = []
    kernel = module.encode_short_text_cpu
    monkeypatch.setattr(module, "encode_short_text_cpu",
                        lambda *args: calls.append(args[0].size) or kernel(*args))
    monkeypatch.setattr(module, "_compiled_entry", lambda dispatcher, args: dispatcher)
    monkeypatch.setattr(tok, "_quick_kernel", None)
    return calls


def test_the_compiled_entry_gives_the_dispatchers_ids(tok):
    from gpubpe import tokenizer as module

    args = (np.frombuffer(b"hello world", np.uint8), *tok._quick, tok._rules)
    expected = module.encode_short_text_cpu(*args).tolist()
    entry = module._compiled_entry(module.encode_short_text_cpu, args)
    assert entry is not module.encode_short_text_cpu  # Numba keeps one: the fast call
    assert entry(*args).tolist() == expected == tok.encode("hello world")
    float_text = (np.zeros(3), *args[1:])  # no overload for these types: the dispatcher
    assert module._compiled_entry(module.encode_short_text_cpu, float_text) is \
        module.encode_short_text_cpu


SHORT_TEXTS = ["", "a", "hello world", "  spaces  around  ", "中文 😀 e\u0301", "x" * 1024,
               "line\r\n\tend\n", "<| not a token", b"\xff\xfe raw bytes", b"aaaa"]


def test_short_texts_take_one_kernel_and_equal_the_batch_path(tok, quick_calls):
    for text in SHORT_TEXTS:  # encode_arrays: the batch path (encode_batch of a few short
        # texts takes the one-kernel path too: test_encode_batch.py)
        batch_ids = tok.encode_arrays([text]).tolist()[0]
        assert tok.encode(text, allowed_special="all") == batch_ids
        assert tok.encode_ordinary(text) == batch_ids
    assert len(quick_calls) == 2 * len(SHORT_TEXTS) - 2  # "<| not a token" holds a start


@pytest.mark.parametrize("text, args", [
    ("x" * 1025, {}),  # over 1 KB
    ("é" * 600, {}),  # 600 characters, 1,200 bytes
    ("a <|endoftext|>", {"disallowed_special": ()}),  # holds a special token
    ("a <|end", {}),  # the start of one: the general path finds none
    ("hi", {"allowed_special": {"<|endoftext|>"}}),  # names to check
    ("hi", {"disallowed_special": ["<|endoftext|>"]}),
])
def test_the_general_path_takes_the_rest(tok, quick_calls, text, args):
    assert tok.encode(text, **args) == tok.encode_batch([text], **args)[0] \
        == tok.encode_arrays([text], **args).tolist()[0]
    assert quick_calls == []


def test_short_texts_keep_their_errors(tok, quick_calls):
    with pytest.raises(SpecialTokenError, match="endoftext"):
        tok.encode("hi<|endoftext|>")
    with pytest.raises(gpubpe.errors.CorpusError, match="lone surrogate"):
        tok.encode("a\ud800")
    with pytest.raises(SpecialTokenError, match="not special tokens"):
        tok.encode("hi", allowed_special={"<|nope|>"})
    assert quick_calls == []


def test_bit_level_and_custom_patterns_keep_the_general_path(tok):
    assert tok._quick is not None
    assert tok.with_bitlevel()._quick is None  # its ids pass through the codec
    custom = gpubpe.train(["ab ab abc"] * 5, 258, pattern=r"\S+|\s+", progress=False)
    assert custom._quick is None  # regex splits it


def test_decode_takes_any_sequence_of_ints_and_names_a_bad_item(tok):
    ids = tok.encode("hello world")
    for form in (ids, tuple(ids), iter(ids), [np.int64(i) for i in ids], np.array(ids)):
        assert tok.decode(form) == "hello world"
    for bad, message in (([True, False], "position 0 is True"), ([1, 2.0], "position 1 is 2.0"),
                         ([1, -1], "id -1 at position 1 is out of range"),
                         ([-1], "id -1 at position 0 is out of range"),  # one id: a path of its own
                         ([2**40], "out of range"), ([1, "a"], "position 1 is 'a'")):
        with pytest.raises((TypeError, ValueError), match=re.escape(message)):
            tok.decode(bad)


@given(st.lists(st.integers(0, 320), max_size=260))
def test_short_id_lists_decode_as_the_gather_does(tok, ids):
    # up to 128 ids in a list are joined in Python; arrays and longer lists take the kernel
    assert tok.decode_bytes(ids) == tok.decode_bytes(np.array(ids, dtype=np.int64))
