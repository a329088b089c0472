"""SentencePiece BPE ``tokenizer.model`` files read by gpubpe, against SentencePiece itself.

- Real files no one here made: Mistral 7B's ``tokenizer.model`` (v1) and its four instruct
  versions (v2, v3, v7, v7m1; 768 control pieces, 20 user-defined ones from v3), from the
  pinned ``mistral-common`` 1.13.1 wheel (``tests/pinned.py``), against the
  ``sentencepiece`` package's ids and text on real documents; ``bench/parity_fuzz.py
  --mistral-files`` runs them on random text.
- Text holding a user-defined piece takes SentencePiece's ids too: its one "▁" goes before
  the whole text (transformers' converter puts one before each stretch between added tokens).
- Models of another kind or with other text rules are refused, naming why.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from pinned import SENTENCEPIECE_FILES, mistral_files
from test_real_vocab import CORPUS, DEMO

import gpubpe
from gpubpe.cli import main
from gpubpe.errors import ModelFormatError

spm = pytest.importorskip("sentencepiece", reason="needs the 'dev' extra")


@pytest.fixture(scope="module")
def mistral_folder() -> Path:
    return mistral_files()


def texts() -> list[str]:
    return (DEMO.read_text(encoding="utf-8").splitlines()[:4000]
            + CORPUS.read_text(encoding="utf-8").splitlines()[:4000]
            + ["", " ", "  a  b ", "\n\nx", " leading", "trailing  ", "\t tab", "<s>[INST] hi",
               "▁x ▁", "🤗 𝔘 \U0010ffff", "12345", "é" * 200])


@pytest.mark.parametrize("name", SENTENCEPIECE_FILES)
def test_mistrals_models_give_sentencepieces_ids(mistral_folder, name):
    path = mistral_folder / name
    processor = spm.SentencePieceProcessor(model_file=str(path))
    tok = gpubpe.load(path, backend="cpu")
    assert tok.n_vocab == processor.get_piece_size()
    controls = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())
                if processor.is_control(i) or processor.is_unknown(i)}
    assert {text: tok.special_tokens[text] for text in controls} == controls
    documents = texts()
    expected = processor.encode(documents)
    assert tok.encode_batch(documents, disallowed_special=()) == expected
    assert [tok.encode(text, disallowed_special=()) for text in documents[-40:]] == \
        expected[-40:]
    assert tok.decode_batch(expected) == processor.decode(expected)


def test_user_defined_pieces_as_sentencepiece_places_them(mistral_folder, tmp_path):
    # v3's [REFERENCE_DOC_n] pieces are matched in text, and SentencePiece's one "▁" goes
    # before the whole text, not before each stretch between them (transformers' converter
    # does that: [ref3, "▁", "▁x", ref19, "▁y"] here).
    path = mistral_folder / "mistral_instruct_tokenizer_240323.model.v3"
    tok = gpubpe.load(path, backend="cpu")
    processor = spm.SentencePieceProcessor(model_file=str(path))
    ref3, ref19 = (processor.piece_to_id(f"[REFERENCE_DOC_{n}]") for n in (3, 19))
    meta, meta_x, letter_y = (processor.piece_to_id(p) for p in ("▁", "▁x", "y"))
    text = "[REFERENCE_DOC_3] x[REFERENCE_DOC_19]y"
    assert processor.encode(text) == tok.encode(text) == [meta, ref3, meta_x, ref19, letter_y]
    documents = [text, "a [REFERENCE_DOC_1]", " [REFERENCE_DOC_1] ", "[REFERENCE_DOC_0]",
                 "[REFERENCE_DOC_0][REFERENCE_DOC_1]", "x\n[REFERENCE_DOC_2]\n", "", " ",
                 "[INST] [REFERENCE_DOC_4] [/INST]"]
    expected = processor.encode(documents)
    assert tok.encode_batch(documents, disallowed_special=()) == expected
    assert tok.decode_batch(expected) == processor.decode(expected)
    tok.save(tmp_path / "saved.json")  # the rule is kept
    saved = gpubpe.load(tmp_path / "saved.json")
    assert saved.encode_batch(documents, disallowed_special=()) == expected
    # A control token allowed in the text starts a stretch, as a document does: HF's rule.
    assert tok.encode("[INST][REFERENCE_DOC_4] hi", allowed_special="all") == \
        [processor.piece_to_id("[INST]"), meta, processor.piece_to_id("[REFERENCE_DOC_4]")] + \
        processor.encode(" hi")[1:]


def test_a_model_without_the_dummy_prefix(mistral_folder, tmp_path):
    # As Gemma's are set up: v3 with add_dummy_prefix off, given as a second normalizer_spec
    # that protobuf merges into the first.
    path = tmp_path / "tokenizer.model"
    path.write_bytes((mistral_folder / "mistral_instruct_tokenizer_240323.model.v3").read_bytes()
                     + field(3, field(3, 0)))
    processor = spm.SentencePieceProcessor(model_file=str(path))
    tok = gpubpe.load(path, backend="cpu")
    documents = texts()[::10] + ["[REFERENCE_DOC_3] x[REFERENCE_DOC_19]y", " a [REFERENCE_DOC_1]",
                                 "Hello", " Hello"]
    expected = processor.encode(documents)
    assert processor.encode("Hello") != processor.encode(" Hello")  # no prefix, indeed
    assert tok.encode_batch(documents, disallowed_special=()) == expected
    assert tok.decode_batch(expected) == processor.decode(expected)


def test_saved_and_hf_exported_keep_sentencepieces_ids(mistral_folder, tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
    path = mistral_folder / SENTENCEPIECE_FILES[0]
    tok = gpubpe.load(path, backend="cpu")
    tok.save(tmp_path / "saved.json")
    tok.to_hf(tmp_path / "tokenizer.json")
    documents = CORPUS.read_text(encoding="utf-8").splitlines()[:3000] + ["  a  b ", " x"]
    expected = spm.SentencePieceProcessor(model_file=str(path)).encode(documents)
    saved = gpubpe.load(tmp_path / "saved.json", backend="cpu")
    assert saved.encode_batch(documents, disallowed_special=()) == expected
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert [e.ids for e in hf.encode_batch(documents, add_special_tokens=False)] == expected


def test_a_model_folder_and_the_cli(mistral_folder, tmp_path, capsys):
    folder = tmp_path / "mistral-7b"  # a folder holding tokenizer.model alone
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes((mistral_folder / SENTENCEPIECE_FILES[0]).read_bytes())
    assert main(["encode", "-t", str(folder), "--text", "Hello world"]) == 0
    processor = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    assert capsys.readouterr().out.split() == [str(i) for i in processor.encode("Hello world")]


# ------------------------------------------------------------ made models, refused ones

def field(number: int, value) -> bytes:
    """One protobuf field: an int as a varint, bytes length-delimited, a float fixed32."""
    if isinstance(value, float):
        return varint(number << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def made_model(trainer=None, normalizer=None) -> bytes:
    """A SentencePiece BPE model as Llama's are set up: <unk>, <s>, </s>, 256 byte pieces,
    then "▁", letters and a few merged pieces with falling scores."""
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    pieces += [(text, -float(i), 1) for i, text in enumerate(
        ["▁t", "he", "▁the", "▁a", "in", "▁", "t", "h", "e", "a", "i", "n", "b"])]
    trainer = {3: 2, 35: 1, 40: 0} | (trainer or {})
    normalizer = {1: b"identity", 3: 1, 4: 0} | (normalizer or {})
    return (b"".join(field(1, field(1, text.encode()) + field(2, score) + field(3, kind))
                     for text, score, kind in pieces)
            + field(2, b"".join(field(k, v) for k, v in trainer.items()))
            + field(3, b"".join(field(k, v) for k, v in normalizer.items())))


def test_a_made_model_gives_sentencepieces_ids(tmp_path):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(made_model())
    processor = spm.SentencePieceProcessor(model_file=str(path))
    tok = gpubpe.load(path)
    documents = ["the bath in a tub", " the", "", "héllo ☃ the", "tthhee  aa"]
    assert tok.encode_batch(documents) == processor.encode(documents)


@pytest.mark.parametrize("trainer, normalizer, message", [
    ({3: 1}, {}, r"a SentencePiece Unigram \(T5, ALBERT, XLNet, mT5 ...\) model, not BPE"),
    ({35: 0}, {}, r"with no byte_fallback"),
    ({24: 1}, {}, r"with treat_whitespace_as_suffix"),
    ({}, {4: 1}, r"with remove_extra_whitespaces"),
    ({}, {1: b"nmt_nfkc", 2: b"\x01\x02"}, r"with the normalizer 'nmt_nfkc'"),
    ({}, {5: 0}, r"with escape_whitespaces off"),
])
def test_a_model_gpubpe_would_read_otherwise_is_refused(tmp_path, trainer, normalizer, message):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(made_model(trainer, normalizer))
    with pytest.raises(ModelFormatError, match=message):
        gpubpe.load(path)


def test_a_truncated_model_is_refused(tmp_path):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(made_model()[:1000])
    with pytest.raises(ModelFormatError, match="is not a SentencePiece model"):
        gpubpe.load(path)
