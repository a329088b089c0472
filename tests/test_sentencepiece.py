"""SentencePiece-style BPE files (HF's ``byte_fallback``: "▁" for spaces, <0xXX> tokens for
characters the vocabulary lacks), imported with HF's ids.

The oracle is HF's tokenizers: a vocabulary it trains (BpeTrainer over Metaspace words,
with byte fallback), run in each text handling such files use: Llama 2's normalizer
(Prepend("▁") + Replace), a Metaspace pre-tokenizer with prepend_scheme "first" or
"always", split or not, Gemma's (Replace, then a Split at spaces, which finds none), a
Replace alone. gpubpe must give HF's ids and decode as HF decodes, on documents in many
scripts and on texts made to meet the edges (leading spaces, "▁" in the text, special
tokens where the prefix would go, characters the vocabulary lacks). llama.cpp's Llama 2,
Phi-3 and Gemma 4 files (real vocabularies, with HF's ids) are in ``test_gguf.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_real_vocab import two_kb_documents as documents
from test_split_sequence import CORPUS, DEMO, EDGES, hf_ids

import gpubpe
from gpubpe import interop
from gpubpe.errors import ConfigError, ModelFormatError
from gpubpe.model import Vocabulary
from gpubpe.sentencepiece import merges_by_score

tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")

SPECIALS = ["<unk>", "<s>", "</s>"]
METASPACE = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
LLAMA2_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
LLAMA2_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
# Texts where the prefix, "▁" and the fallback meet; <s> where the prefix would go.
TEXTS = EDGES + ["", " ", "  x", "▁x", "x▁▁y ▁ z", "▁", " ▁a", "<s>Hello", "<s> Hello",
                 "a<s>b", "Hello</s>", "🦙 llama ☃ snow", "\t\n x", "x\u3000y  ", "Ǆ ǅ ǆ"]


@pytest.fixture(scope="module")
def trained() -> dict:
    """A 2,000-token SentencePiece-style vocabulary HF trains on the demo corpus (characters
    seen in it are its alphabet; the 256 <0xXX> tokens follow the trained ones)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=SPECIALS, show_progress=False)
    hf.train_from_iterator(documents(DEMO, 200), trainer)
    data = json.loads(hf.to_str())
    vocab = data["model"]["vocab"]
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    return data


def variant(data: dict, **sections) -> dict:
    return {**data, **sections}


VARIANTS = {
    "llama2-normalizer": dict(normalizer=LLAMA2_NORMALIZER, pre_tokenizer=None,
                              decoder=LLAMA2_DECODER),
    "metaspace-first": dict(normalizer=None, pre_tokenizer=METASPACE, decoder=LLAMA2_DECODER),
    "metaspace-always-split": dict(normalizer=None, pre_tokenizer={
        **METASPACE, "prepend_scheme": "always", "split": True}, decoder=LLAMA2_DECODER),
    "gemma": dict(normalizer={"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
                  pre_tokenizer={"type": "Split", "pattern": {"String": " "},
                                 "behavior": "MergedWithPrevious", "invert": False},
                  decoder={**LLAMA2_DECODER, "decoders": LLAMA2_DECODER["decoders"][:3]}),
    "no-prefix": dict(normalizer={"type": "Replace", "pattern": {"String": " "},
                                  "content": "▁"}, pre_tokenizer=None,
                      decoder={**LLAMA2_DECODER, "decoders": LLAMA2_DECODER["decoders"][:3]}),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_hf_trained_files_give_hfs_ids_and_text(trained, name):
    data = variant(trained, **VARIANTS[name])
    hf = tokenizers.Tokenizer.from_str(json.dumps(data))
    tok = gpubpe.Tokenizer(interop.from_hf(data))
    texts = TEXTS + documents(CORPUS, 120) + documents(DEMO, 30)
    want = hf_ids(hf, texts)
    assert any(i >= 2000 for ids in want for i in ids)  # some characters fall back to bytes
    assert tok.encode_batch(texts, allowed_special="all") == want
    assert tok.encode_batch(texts, allowed_special="all", num_threads=1) == want
    assert [tok.encode(text, allowed_special="all") for text in TEXTS] == want[:len(TEXTS)]
    plain = [text for text in TEXTS if "<" not in text]  # one kernel call each (_quick_ids)
    assert [tok.encode(text) for text in plain] == hf_ids(hf, plain)
    assert tok.decode_batch(want) == hf.decode_batch(want, skip_special_tokens=False)
    assert [tok.decode(ids) for ids in want[:len(TEXTS)]] == \
        [hf.decode(ids, skip_special_tokens=False) for ids in want[:len(TEXTS)]]


def test_decode_arrays_drops_the_prefix_space_of_each_sequence(trained):
    tok = gpubpe.Tokenizer(interop.from_hf(variant(trained, **VARIANTS["llama2-normalizer"])))
    batch = tok.encode_arrays(["a b", "", " c", "<s>d"], allowed_special="all")
    out, bounds = tok.decode_arrays(batch.ids, batch.offsets)
    assert [out[a:b].tobytes() for a, b in zip(bounds[:-1], bounds[1:])] == \
        [b"a b", b"", b" c", b"<s> d"]
    assert tok.decode_bytes(tok.encode(" c")) == b" c"


def test_saved_and_loaded_it_keeps_its_ids(trained, tmp_path):
    tok = gpubpe.Tokenizer(interop.from_hf(variant(trained, **VARIANTS["metaspace-first"])))
    tok.save(tmp_path / "spm.json")
    again = gpubpe.load(tmp_path / "spm.json")
    texts = TEXTS + documents(CORPUS, 20)
    ids = tok.encode_batch(texts, allowed_special="all")
    assert again.encode_batch(texts, allowed_special="all") == ids
    assert again.decode_batch(ids) == tok.decode_batch(ids)
    assert again.vocabulary.n_ids == tok.vocabulary.n_ids == 2000 + 256


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_exported_as_a_tokenizer_json_hf_gives_the_same_ids(trained, name, tmp_path):
    tok = gpubpe.Tokenizer(interop.from_hf(variant(trained, **VARIANTS[name])))
    tok.to_hf(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = TEXTS + documents(CORPUS, 40)
    ids = tok.encode_batch(texts, allowed_special="all")
    assert hf_ids(hf, texts) == ids
    assert hf.decode_batch(ids, skip_special_tokens=False) == tok.decode_batch(ids)
    again = gpubpe.Tokenizer.from_hf(tmp_path / "tokenizer.json")
    assert again.encode_batch(texts, allowed_special="all") == ids


def test_what_it_cannot_be_turned_into_is_refused(trained):
    vocab = interop.from_hf(variant(trained, **VARIANTS["llama2-normalizer"]))
    with pytest.raises(ConfigError, match="SentencePiece-style.*export it as a HF"):
        interop.to_tiktoken(vocab)


@pytest.mark.parametrize("change, message", [
    (dict(normalizer=None, pre_tokenizer=None), "does not turn spaces into '▁'"),
    (dict(pre_tokenizer={"type": "Whitespace"}), "Whitespace"),
    (dict(normalizer={"type": "NFKC"}, pre_tokenizer=METASPACE), "NFKC"),
    (dict(decoder=None), "keeps the prefix space"),
])
def test_text_handling_it_does_not_follow_is_named(trained, change, message):
    data = variant(trained, **{**VARIANTS["llama2-normalizer"], **change})
    with pytest.raises(ModelFormatError, match=message):
        interop.from_hf(data)


def test_an_added_token_hf_matches_after_the_normalizer_is_named(trained):
    """HF matches a normalized added token in the normalized text, its content normalized
    too ("[INST]" becomes "▁[INST]" under Llama 2's Prepend): gpubpe matches as written."""
    added = [*trained["added_tokens"], {"id": 2256, "content": "[INST]", "single_word": False,
                                         "lstrip": False, "rstrip": False, "normalized": True,
                                         "special": True}]
    data = variant(trained, added_tokens=added, **VARIANTS["llama2-normalizer"])
    with pytest.raises(ModelFormatError, match="'\\[INST\\]' has normalized: true"):
        interop.from_hf(data)
    vocab = interop.from_hf(data, strict=False)
    assert "[INST]" in vocab.special_tokens
    assert any("normalized: true" in note for note in vocab.metadata["hf_import_notes"])
    # Metaspace files have no normalizer: the flag changes nothing there.
    interop.from_hf(variant(trained, added_tokens=added, **VARIANTS["metaspace-first"]))


def test_a_byte_token_named_by_its_character_is_read(trained, tmp_path):
    """transformers' Gemma converter renames <0x09> to "\t": that byte is then a character
    of the vocabulary, whose id the tab gets, and HF never falls back for it."""
    vocab = {("\t" if text == "<0x09>" else text): i
             for text, i in trained["model"]["vocab"].items()}
    vocab["\t\t"] = len(vocab)  # and merged, as Gemma's runs of tabs are
    data = variant(trained, model={**trained["model"], "vocab": vocab,
                                   "merges": [["\t", "\t"], *trained["model"]["merges"]]},
                   **VARIANTS["gemma"])
    hf = tokenizers.Tokenizer.from_str(json.dumps(data))
    tok = gpubpe.Tokenizer(interop.from_hf(data))
    texts = ["a\tb", "\t\t x\t", "中\t文"]
    want = hf_ids(hf, texts)
    assert vocab["\t"] in want[0] and vocab["\t\t"] in want[1]
    assert tok.encode_batch(texts) == want
    assert tok.decode_batch(want) == texts
    tok.to_hf(tmp_path / "tokenizer.json")  # the tab keeps its name: a merge joins it
    assert hf_ids(tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")), texts) == want


def test_a_file_without_every_byte_token_is_refused(trained):
    vocab = {text: i for text, i in trained["model"]["vocab"].items() if text != "<0xE4>"}
    data = variant(trained, model={**trained["model"], "vocab": vocab}, **VARIANTS["no-prefix"])
    with pytest.raises(ModelFormatError, match="lacks <0xE4>"):
        interop.from_hf(data)


def test_merges_by_score_are_the_converters():
    """transformers' SentencePieceExtractor: every split into two pieces, by the piece's
    score (highest first), ties in vocab order, a piece's splits by their pieces' ids."""
    texts = ["a", "b", "c", "ab", "bc", "abc", "ca"]
    scores = [0.0, 0.0, 0.0, -1.0, -1.0, -2.0, -0.5]
    assert merges_by_score(texts, scores) == [["c", "a"], ["a", "b"], ["b", "c"],
                                              ["a", "bc"], ["ab", "c"]]
    ids = np.arange(len(texts))
    assert merges_by_score(texts, (-ids).tolist())[0] == ["a", "b"]


# ------------------------------------------------------------ the cut where no token joins
# A vocabulary that splits no text (these files; a byte-level one trained without a
# pattern) is cut between bytes no token holds together (``kernels.pretok.JOINS``):
# the ids must be those of BPE over each whole text.

def test_a_token_across_a_space_keeps_the_text_joined_there(trained):
    """With a merge "e" + "▁" ranked first (as Gemma 4's ">▁</" joins a space to what is
    before it), HF merges across those spaces, and so must gpubpe."""
    model = trained["model"]
    vocab = {**model["vocab"], "e▁": len(model["vocab"])}
    data = variant(trained, model={**model, "vocab": vocab, "merges": [["e", "▁"]] +
                                   model["merges"]}, **VARIANTS["llama2-normalizer"])
    hf = tokenizers.Tokenizer.from_str(json.dumps(data))
    tok = gpubpe.Tokenizer(interop.from_hf(data))
    texts = TEXTS + documents(DEMO, 40)
    want = hf_ids(hf, texts)
    assert sum(ids.count(vocab["e▁"]) for ids in want) > 100
    assert tok.encode_batch(texts, allowed_special="all") == want


def test_a_byte_level_vocabulary_without_a_pattern_is_bpe_of_each_whole_text():
    from gpubpe import _reference

    vocab = gpubpe.train(documents(DEMO, 60), vocab_size=600, progress=False).vocabulary
    whole = Vocabulary.from_rules(vocab.rules, pattern=None)
    tok = gpubpe.Tokenizer(whole)
    texts = EDGES + documents(CORPUS, 15) + ["the end. The  end\n\nthe"]
    rules = [tuple(rule) for rule in whole.rules.tolist()]
    assert tok.encode_batch(texts) == [_reference.encode_word(text.encode(), rules)
                                       for text in texts]
    assert tok.encode_batch(texts, num_threads=2) == tok.encode_batch(texts, num_threads=1)


def test_the_device_encodes_and_decodes_it_as_hf_does(trained):
    """backend="cuda" (the simulator here, a GPU with NUMBA_ENABLE_CUDASIM=0): the host
    rewrites the text (prefix spaces, "▁"), the device cuts it where no token joins and
    runs BPE; characters the vocabulary lacks become <0xXX> ids in the same scatter."""
    from gpubpe.kernels._cuda import launch_counts, to_host

    data = variant(trained, **VARIANTS["metaspace-first"])
    hf = tokenizers.Tokenizer.from_str(json.dumps(data))
    tok = gpubpe.Tokenizer(interop.from_hf(data), backend="cuda")
    texts = ["Hello world", "", " 🦙 llama▁x", "<s>a b", "中文 text  ", "x\u3000y"]
    want = hf_ids(hf, texts)
    before = launch_counts["item_lookup_kernel"]
    assert tok.encode_batch(texts, allowed_special="all") == want
    assert launch_counts["item_lookup_kernel"] == before + 1  # the batch ran on the device
    on_device = tok.encode_arrays(texts, allowed_special="all", device=True)
    texts_back = hf.decode_batch(want, skip_special_tokens=False)
    assert tok.decode_batch(on_device) == texts_back
    out, bounds = (to_host(array, "a test") for array in
                   tok.decode_arrays(on_device.ids, on_device.offsets))
    assert [out[a:b].tobytes().decode() for a, b in zip(bounds[:-1], bounds[1:])] == texts_back


def test_transformers_loads_the_exported_folder(trained, tmp_path):
    """``gpubpe export -o folder``: transformers' AutoTokenizer gives gpubpe's ids and text."""
    transformers = pytest.importorskip("transformers", reason="needs the 'dev' extra")
    from gpubpe.cli import main

    tok = gpubpe.Tokenizer(interop.from_hf(variant(trained, **VARIANTS["llama2-normalizer"])))
    tok.save(tmp_path / "spm.json")
    assert main(["export", "-t", str(tmp_path / "spm.json"), "-o", str(tmp_path / "hf"),
                 "--bos-token", "<s>", "--eos-token", "</s>"]) == 0
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    texts = [text for text in TEXTS if text] + documents(CORPUS, 10)
    ids = tok.encode_batch(texts, allowed_special="all")
    assert [auto(text, add_special_tokens=False)["input_ids"] for text in texts] == ids
    assert auto.batch_decode(ids) == tok.decode_batch(ids)
