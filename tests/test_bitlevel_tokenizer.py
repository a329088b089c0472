"""Tokenizer.with_bitlevel: the codec inside encode/decode, kept by save/load; exports."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe.bitlevel import PAPER_LEAD_BYTES
from gpubpe.errors import ConfigError


@pytest.fixture(scope="module")
def tok():
    docs = ["the quick brown fox", "hello world", "한국어 텍스트", "日本語のテキスト"] * 5
    return gpubpe.train(docs, 300, special_tokens=["<|eot|>"], progress=False)


def test_codec_shortens_cjk_byte_fallbacks(tok):
    bl = tok.with_bitlevel()
    text = "召唤众召唤众召唤众"  # nine characters the vocabulary never saw: 27 byte tokens
    plain = tok.encode(text)
    assert len(plain) == 27
    coded = bl.encode(text)
    # Same lead-byte prefix? E4 E5 E4 ... differ in b1 >> 2 only across 0xE4-0xE7: one
    # prefix for all, then 2 ids per character: 1 + 18.
    assert len(coded) == 19
    assert bl.decode(coded) == text
    assert coded == bl.codec.encode(plain)


@given(st.text(max_size=40))
def test_round_trip_through_the_codec(tok, text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    bl = tok.with_bitlevel(PAPER_LEAD_BYTES)
    ids = bl.encode(text, disallowed_special=())
    assert all(0 <= i < bl.n_vocab for i in ids)
    assert bl.decode(ids) == text
    assert bl.decode_batch([ids, []]) == [text, ""]


def test_special_tokens_keep_their_ids(tok):
    bl = tok.with_bitlevel()
    eot = tok.special_tokens["<|eot|>"]
    ids = bl.encode("召<|eot|>召", allowed_special="all")
    assert eot in ids and bl.decode(ids) == "召<|eot|>召"
    assert bl.n_vocab == tok.n_vocab + 256 + 4  # E0-EF: prefixes 0x38-0x3B


def test_save_load_keeps_the_codec(tok, tmp_path):
    bl = tok.with_bitlevel(PAPER_LEAD_BYTES)
    path = tmp_path / "bl.json"
    bl.save(path)
    loaded = gpubpe.load(path)
    assert type(loaded).__name__ == "BitLevelTokenizer"
    assert loaded.codec.lead_bytes == bl.codec.lead_bytes
    assert loaded.encode("召唤众 hello") == bl.encode("召唤众 hello")


def test_exports_refuse_bitlevel_and_scaffold(tok):
    with pytest.raises(ConfigError, match="sub-byte"):
        tok.with_bitlevel().to_hf_json()
    with pytest.raises(ConfigError, match="sub-byte"):
        tok.with_bitlevel().to_tiktoken()
    scaffold = gpubpe.train(["Arizona"] * 10 + ["zona"] * 2 + ["zon"] * 3, 259, scaffold=True,
                            pattern=None, progress=False)
    with pytest.raises(ConfigError, match="[Ss]caffold"):
        scaffold.to_hf_json()


def test_tokenizer_round_trips_through_hf_and_tiktoken(tok, tmp_path):
    text = "hello world 한국어 the fox"
    path = tmp_path / "tokenizer.json"
    tok.to_hf(path)
    again = gpubpe.Tokenizer.from_hf(path)
    assert again.encode(text) == tok.encode(text)
    encoding = tok.to_tiktoken()
    assert encoding.encode_ordinary(text) == tok.encode(text)
    assert gpubpe.Tokenizer.from_tiktoken(encoding).encode(text) == tok.encode(text)
