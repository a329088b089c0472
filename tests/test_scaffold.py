"""Scaffold-BPE: fast training against the reference, a hand-worked golden, the file format."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference
from gpubpe.cli import demo_corpus_path
from gpubpe.errors import ConfigError, ModelFormatError
from gpubpe.model import Vocabulary, shortest_normal_pieces
from gpubpe.pretokenize import count_words
from gpubpe.trainer import train_from_counts

ARIZONA = ["Arizona"] * 10 + ["zona"] * 2 + ["zon"] * 3


def fast_scaffold(word_counts, vocab_size):
    rules, flags = train_from_counts(word_counts, vocab_size, scaffold=True, progress=False)
    return [tuple(r) for r in rules.tolist()], flags.tolist()


@given(st.dictionaries(st.binary(min_size=1, max_size=8).map(lambda b: bytes(97 + x % 4 for x in b)),
                       st.integers(1, 9), min_size=1, max_size=12),
       st.integers(257, 300))
def test_fast_scaffold_training_equals_reference(word_counts, vocab_size):
    assert fast_scaffold(word_counts, vocab_size) == _reference.train_scaffold_bpe(
        word_counts, vocab_size)


@pytest.mark.parametrize("vocab_size", [300, 600])
def test_fast_scaffold_equals_reference_on_real_text(vocab_size):
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:400]
    word_counts = count_words(lines)
    expected = _reference.train_scaffold_bpe(word_counts, vocab_size)
    assert fast_scaffold(word_counts, vocab_size) == expected
    assert any(expected[1]), "this corpus should make some scaffold tokens"


def test_golden_zona_becomes_scaffold_is_demolished_and_readmitted():
    # Words: "Arizona" x10, "zona" x2, "zon" x3 (pattern=None: each document is one word).
    # |V| counts normal tokens; we ask for 259.
    # 1. (o,n) and (z,o) both occur 15 times; HF's order takes (o,n) -> on (256). |V| 257.
    # 2. (z,on) 15 -> zon (257); f(on) = 0 < head (zon,a) = 12  => on is scaffold. |V| 257.
    # 3. (zon,a) 12 -> zona (258); f(zon) = 15 - 12 = 3 < head 10  => zon is scaffold. |V| 257.
    # 4. (A,r), (r,i), (i,zona) tie at 10; 'A' is the smallest -> Ar (259). |V| 258.
    # 5. (Ar,i) and (i,zona) tie at 10; byte 'i' ranks before id 259 -> izona (260);
    #    f(zona) = 12 - 10 = 2 < head (Ar,izona) = 10  => zona is scaffold. |V| 258.
    # 6. (Ar,izona) 10 -> Arizona (261); f(Ar) = f(izona) = 0 < head (token zon, 3)
    #    => Ar and izona are scaffold (f = 0: never queued again). |V| 257.
    # 7. The head is the scaffold token zon (f = 3): re-admitted. |V| 258.
    # 8. The head is the scaffold token zona (f = 2): re-admitted. |V| 259: stop.
    events = []
    rules, flags = _reference.train_scaffold_bpe(count_words(ARIZONA, pattern=None), 259, events)
    names = _reference.token_bytes_of(rules)
    assert [(kind, names[t]) for kind, t in events] == [
        ("scaffold", b"on"), ("scaffold", b"zon"), ("scaffold", b"zona"), ("scaffold", b"Ar"),
        ("scaffold", b"izona"), ("readmit", b"zon"), ("readmit", b"zona")]
    tok = gpubpe.train(ARIZONA, 259, scaffold=True, pattern=None, progress=False)
    assert tok.vocab_size == 259
    assert tok.scaffold_tokens == [b"on", b"Ar", b"izona"]
    # Output ids: bytes 0-255, then normal tokens in creation order: zon 256, zona 257,
    # Arizona 258.
    assert tok.encode("Arizona") == [258]
    assert tok.encode("zona") == [257]
    # Scaffolding builds "izona" (260) and "Ar" (259), scaffold tokens; Demolishing splits
    # them through the rules that made them: izona = i + zona, Ar = A + r.
    assert tok.encode("izona") == [ord("i"), 257]
    assert tok.encode("Ar") == [ord("A"), ord("r")]
    assert tok.decode([ord("i"), 257]) == "izona"


@given(st.text(max_size=50))
def test_output_ids_are_below_vocab_size_and_round_trip(text):
    tok = _scaffold_tokenizer()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    ids = tok.encode(text, disallowed_special=())
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


_CACHE = {}


def _scaffold_tokenizer():
    if "tok" not in _CACHE:
        lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:3000]
        _CACHE["tok"] = gpubpe.train(lines, 1000, scaffold=True, progress=False)
    return _CACHE["tok"]


def test_scaffold_vocab_counts_normal_tokens_only():
    tok = _scaffold_tokenizer()
    vocab = tok.vocabulary
    assert tok.vocab_size == 1000
    assert len(vocab.token_bytes) == 1000 + len(tok.scaffold_tokens)
    assert vocab.demolish_ids.max() < 1000


def test_scaffold_false_is_plain_bpe():
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:500]
    plain = gpubpe.train(lines, 400, progress=False)
    assert plain.scaffold_tokens == []
    assert [tuple(r) for r in plain.vocabulary.rules.tolist()] == _reference.train_bpe(
        count_words(lines), 400)


def test_demolish_table_equals_reference():
    vocab = _scaffold_tokenizer().vocabulary
    rules = [tuple(r) for r in vocab.rules.tolist()]
    assert shortest_normal_pieces(vocab.rules, vocab.scaffold) == _reference.demolish_table(
        rules, vocab.scaffold.tolist())


def test_save_load_keeps_scaffold(tmp_path):
    tok = _scaffold_tokenizer()
    path = tmp_path / "s.json"
    tok.save(path)
    loaded = gpubpe.load(path)
    assert loaded.scaffold_tokens == tok.scaffold_tokens
    text = "Scaffolding builds tokens, demolishing splits them."
    assert loaded.encode(text) == tok.encode(text)


def test_inconsistent_scaffold_files_are_rejected(tmp_path):
    tok = _scaffold_tokenizer()
    data = json.loads(json.dumps(tok.vocabulary.to_json()))
    byte_scaffold = dict(data, scaffold=[*data["scaffold"], 65])
    with pytest.raises(ModelFormatError, match="byte token 65"):
        Vocabulary.from_json(byte_scaffold)
    first = str(data["scaffold"][0])
    wrong = dict(data, demolish=dict(data["demolish"], **{first: [97, 98]}))
    with pytest.raises(ModelFormatError, match="spells"):
        Vocabulary.from_json(wrong)


def test_scaffold_needs_vocab_above_256():
    with pytest.raises(ConfigError, match="above 256"):
        gpubpe.train(["abc"], 256, scaffold=True, progress=False)


def test_small_corpus_warns_with_reached_size():
    with pytest.warns(UserWarning, match="stopped at 259"):
        tok = gpubpe.train(ARIZONA, 300, scaffold=True, pattern=None, progress=False)
    assert tok.vocab_size == 259
    assert np.all(tok.vocabulary.demolish_ids < 259)
