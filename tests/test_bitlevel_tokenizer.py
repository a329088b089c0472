"""Tokenizer.with_bitlevel: the codec inside encode/decode, kept by save/load; exports."""

from __future__ import annotations

import base64

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


# The paper's §3.3 bytes (test_bitlevel.PAPER_BYTES): E4 BC 97 E5 94 A4 E4 BC 97.
PAPER_TEXT = bytes([0xE4, 0xBC, 0x97, 0xE5, 0x94, 0xA4, 0xE4, 0xBC, 0x97]).decode()


def test_the_papers_golden_where_the_byte_tokens_are_not_ids_0_255(tmp_path):
    """Imported vocabularies number their byte tokens their own way (GPT-2's character
    order in GPT-2's and cl100k's, 3-258 in Llama 2's). The codec must read the bytes those
    ids stand for: a tiktoken file of the 256 bytes alone, in GPT-2's order, gives the
    paper's ids on the paper's bytes, and decodes them back."""
    from gpubpe.bytes_order import BYTE_TO_CHAR

    order = sorted(range(256), key=lambda b: ord(BYTE_TO_CHAR[b]))  # GPT-2's byte ids
    ranks = tmp_path / "bytes.tiktoken"
    ranks.write_text("".join(f"{base64.b64encode(bytes([b])).decode()} {rank}\n"
                             for rank, b in enumerate(order)))
    base = gpubpe.Tokenizer.from_tiktoken(str(ranks), pattern="gpt2")
    assert base.encode(PAPER_TEXT)[:3] == [order.index(0xE4), order.index(0xBC),
                                           order.index(0x97)]
    coded = base.with_bitlevel(PAPER_LEAD_BYTES)
    codec = coded.codec
    values = [0x05E, 0x097, 0x0CA, 0x0A4, 0x05E, 0x097]
    golden = [codec.prefix_id(0x39)] + [codec.value_id(v) for v in values]
    assert coded.encode(PAPER_TEXT) == golden
    assert coded.decode(golden) == PAPER_TEXT
    assert coded.decode_batch([golden, [], golden[:3]]) == [PAPER_TEXT, "", PAPER_TEXT[:1]]
    on_device = coded.with_backend("cuda")  # the simulator here; codec kernels on the device
    batch = on_device.encode_arrays([PAPER_TEXT, "x"], device=True)
    assert on_device.decode_batch(batch) == [PAPER_TEXT, "x"]
    assert on_device.encode_batch([PAPER_TEXT]) == [golden]
