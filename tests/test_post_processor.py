"""``add_special_tokens=True``: the special tokens a model's own tool puts around a text.

The oracle is HF ``tokenizers`` (``encode(text)``, whose default adds them) on a tokenizer.json
with each kind of post-processor HF has, around Llama 3's vocabulary (llama.cpp's GGUF file,
as HF reads it); the ``sentencepiece`` package's ``add_bos`` for Mistral's ``tokenizer.model``
files; llama.cpp's defaults (``llama-vocab.cpp``) for GGUF files that say nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pinned import SENTENCEPIECE_FILES, mistral_files
from test_gguf import models  # noqa: F401 (a fixture)
from test_real_vocab import CORPUS, DEMO

import gpubpe
from gpubpe.cli import main
from gpubpe.errors import ModelFormatError
from gpubpe.gguf import hf_tokenizer_json, read_metadata
from gpubpe.model import Template, Vocabulary

tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
processors = tokenizers.processors

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
BOS_ID, EOS_ID = 128000, 128001


def texts() -> list[str]:
    return (DEMO.read_text(encoding="utf-8").splitlines()[:300]
            + CORPUS.read_text(encoding="utf-8").splitlines()[:300]
            + ["", " ", f"a {EOS} b", BOS, "中文 text"])


@pytest.fixture(scope="module")
def llama3_hf(models):  # noqa: F811
    """Llama 3's vocabulary as HF reads llama.cpp's file (its post-processor: BOS first)."""
    path = models / "ggml-vocab-llama-bpe.gguf"
    return json.loads(json.dumps(hf_tokenizer_json(read_metadata(path), str(path))))


PROCESSORS = {
    "gguf's own (BOS)": None,
    "template, two before and one after": lambda: processors.TemplateProcessing(
        single=f"{BOS} {EOS} $A {EOS}", pair=f"{BOS} $A {BOS}:1 $B:1",
        special_tokens=[(BOS, BOS_ID), (EOS, EOS_ID)]),
    "Llama 3's: ByteLevel then a template": lambda: processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, BOS_ID)])]),
    "RoBERTa's": lambda: processors.RobertaProcessing(sep=(EOS, EOS_ID), cls=(BOS, BOS_ID)),
    "BERT's": lambda: processors.BertProcessing(sep=(EOS, EOS_ID), cls=(BOS, BOS_ID)),
    "ByteLevel alone (adds nothing)": lambda: processors.ByteLevel(trim_offsets=False),
}


@pytest.mark.parametrize("kind", PROCESSORS)
def test_add_special_tokens_gives_hfs_default_ids(llama3_hf, kind, tmp_path):
    hf = tokenizers.Tokenizer.from_str(json.dumps(llama3_hf))
    if PROCESSORS[kind] is not None:
        hf.post_processor = PROCESSORS[kind]()
    tok = gpubpe.Tokenizer.from_hf(json.loads(hf.to_str()))
    docs = texts()
    want = [e.ids for e in hf.encode_batch(docs)]
    plain = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert (want != plain) == (tok.template is not None)
    assert tok.encode_batch(docs, allowed_special="all", add_special_tokens=True) == want
    assert tok.encode_batch(docs, allowed_special="all") == plain
    assert tok.encode_arrays(docs, allowed_special="all", add_special_tokens=True,
                             num_threads=2).tolist() == want
    assert [tok.encode(d, allowed_special="all", add_special_tokens=True)
            for d in docs[-20:]] == want[-20:]
    # saved and loaded, and exported to HF: the same template
    tok.save(tmp_path / "tok.json")
    again = gpubpe.Tokenizer.load(tmp_path / "tok.json")
    assert again.template == tok.template
    assert again.encode_batch(docs[:50], allowed_special="all", add_special_tokens=True) == \
        want[:50]
    exported = tokenizers.Tokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert [e.ids for e in exported.encode_batch(docs)] == want


def test_a_template_survives_truncate_and_extend(tmp_path):
    vocab = Vocabulary.from_rules(np.zeros((0, 3)), [BOS, EOS], metadata={})
    vocab.template = Template((BOS,), (EOS,))
    small = gpubpe.Tokenizer(vocab).truncate(256)
    assert small.template == Template((BOS,), (EOS,))
    assert small.encode("ab", add_special_tokens=True) == \
        [small.special_tokens[BOS], 97, 98, small.special_tokens[EOS]]
    corpus = tmp_path / "c.txt"
    corpus.write_text("abab abab cdcd\n" * 50, encoding="utf-8")
    grown = gpubpe.train([corpus], extend=small, add=3, progress=False)
    assert grown.template == small.template
    assert grown.encode("abab", add_special_tokens=True) == \
        [grown.special_tokens[BOS], *grown.encode("abab"), grown.special_tokens[EOS]]
    assert len(grown.encode("abab")) < 4  # the new tokens are used


def test_hf_sequences_of_two_templates_are_not_followed(llama3_hf):
    """HF 0.22 runs the second step on the first one's parts as a pair ([BOS], [A]): its ids
    are neither template's; gpubpe refuses the file, or with strict=False drops the template."""
    hf = tokenizers.Tokenizer.from_str(json.dumps(llama3_hf))
    hf.post_processor = processors.Sequence([
        processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, BOS_ID)]),
        processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, EOS_ID)])])
    assert hf.encode("Hi").ids == [BOS_ID, 13347]  # the second step added nothing
    data = json.loads(hf.to_str())
    with pytest.raises(ModelFormatError, match="a Sequence of 2 steps that add tokens"):
        gpubpe.Tokenizer.from_hf(data)
    tok = gpubpe.Tokenizer.from_hf(data, strict=False)
    assert tok.template is None
    assert "post_processor" in tok.metadata["hf_import_notes"][0]


@pytest.mark.parametrize("change, message", [
    (lambda p: p["special_tokens"][BOS].update(ids=[5]), "adds '<|begin_of_text|>' as id 5"),
    (lambda p: p.update(single=[{"Sequence": {"id": "B", "type_id": 0}}]), "not \\$A"),
    (lambda p: p.update(single=[]), "holds \\$A 0 times"),
    (lambda p: p.update(type="Nope"), "type 'Nope'; expected ByteLevel"),
    (lambda p: p["special_tokens"].clear(), "needs an entry in 'special_tokens'"),
])
def test_a_template_gpubpe_cannot_follow_says_why(llama3_hf, change, message):
    data = json.loads(json.dumps(llama3_hf))
    change(data["post_processor"])
    with pytest.raises(ModelFormatError, match=message):
        gpubpe.Tokenizer.from_hf(data)


def test_gguf_files_add_what_llama_cpp_adds(models):  # noqa: F811
    """llama.cpp's ``add_special``: a file's add_bos_token / add_eos_token, else a BOS for
    SentencePiece models and the Llama 3 family's split names, none for the others."""
    expected = {"llama-bpe": (BOS,), "llama-spm": ("<s>",), "command-r": ("<BOS_TOKEN>",),
                "gemma-4": ("<bos>",), "gpt-2": None, "qwen2": None, "starcoder": None}
    for name, before in expected.items():
        tok = gpubpe.Tokenizer.from_gguf(models / f"ggml-vocab-{name}.gguf")
        assert tok.template == (None if before is None else Template(before)), name


@pytest.mark.parametrize("name", SENTENCEPIECE_FILES)
def test_tokenizer_model_adds_sentencepieces_bos(name):
    spm = pytest.importorskip("sentencepiece", reason="needs the 'dev' extra")
    path = mistral_files() / name
    processor = spm.SentencePieceProcessor(model_file=str(path))
    tok = gpubpe.load(path, backend="cpu")
    docs = texts()
    assert tok.encode_batch(docs, disallowed_special=(), add_special_tokens=True) == \
        processor.encode(docs, add_bos=True)


def test_tekken_adds_mistrals_bos():
    tok = gpubpe.load(mistral_files() / "tekken_240911.json", backend="cpu")
    assert tok.template == Template(before=("<s>",))
    assert tok.encode("Hello", add_special_tokens=True) == [1, *tok.encode("Hello")]


def test_encode_files_and_the_cli_frame_inside_prepend_and_append(llama3_hf, tmp_path,
                                                                   capsys):
    tok = gpubpe.Tokenizer.from_hf(llama3_hf)
    docs = [d for d in texts() if d and "\n" not in d][:200]
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(docs) + "\n", encoding="utf-8")
    gpubpe.encode_files(tok, [corpus], tmp_path / "ids.npy", add_special_tokens=True,
                        append_special=EOS, progress=False)
    ids, offsets = gpubpe.load_tokens(tmp_path / "ids.npy")
    lines = [doc + "\n" for doc in docs]  # a .txt document keeps its newline
    want = [[*ids_, EOS_ID] for ids_ in tok.encode_batch(lines, add_special_tokens=True,
                                                          disallowed_special=())]
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == want
    tok.save(tmp_path / "tok.json")
    assert main(["encode", "-t", str(tmp_path / "tok.json"), "--text", "Hello world",
                 "--add-special-tokens", "--prepend-special", EOS]) == 0
    assert capsys.readouterr().out.split() == [str(EOS_ID), str(BOS_ID), "9906", "1917"]
    assert main(["decode", "-t", str(tmp_path / "tok.json"), str(tmp_path / "ids.npy"),
                 "--skip-special-tokens"]) == 0
    assert capsys.readouterr().out == corpus.read_text(encoding="utf-8")
    assert main(["decode", "-t", str(tmp_path / "tok.json"), str(BOS_ID), "9906",
                 "--skip-special-tokens"]) == 0
    assert capsys.readouterr().out == "Hello\n"


def test_device_ids_are_framed_on_the_device_without_a_read(llama3_hf):
    """``encode_arrays(device=True, add_special_tokens=True)``: the same ids, framed by array
    operations on the device (the simulator's guarded arrays raise on a hidden read), with
    not one sync more than without the template."""
    from gpubpe.kernels._cuda import SimulatedDeviceArray, to_host

    tok = gpubpe.Tokenizer.from_hf(llama3_hf, strict=True)
    docs = [d for d in texts() if d][:40] + [""]
    want = tok.encode_batch(docs, add_special_tokens=True, disallowed_special=())
    gpu = tok.with_backend("cuda")
    gpu.encode_arrays(docs, device=True, disallowed_special=())  # warm: compiled, words cached
    with gpubpe.device_stats() as plain:
        gpu.encode_arrays(docs, device=True, disallowed_special=())
    with gpubpe.device_stats() as framed:
        got = gpu.encode_arrays(docs, device=True, add_special_tokens=True,
                                disallowed_special=(), dtype=np.int64)
    assert isinstance(got.ids, SimulatedDeviceArray) and got.ids.dtype == np.int64
    ids, offsets = to_host(got.ids), to_host(got.offsets)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == want
    assert framed.syncs == plain.syncs
    data, bounds = gpu.decode_arrays(got.ids, got.offsets, skip_special_tokens=True)
    assert isinstance(data, SimulatedDeviceArray)
    data, bounds = to_host(data), to_host(bounds)
    assert [data[a:b].tobytes().decode() for a, b in zip(bounds[:-1], bounds[1:])] == docs


def test_transformers_adds_the_exported_template(llama3_hf, tmp_path):
    transformers = pytest.importorskip("transformers", reason="needs the 'dev' extra")
    tok = gpubpe.Tokenizer.from_hf(llama3_hf)
    tok.save(tmp_path / "tok.json")
    assert main(["export", "-t", str(tmp_path / "tok.json"), "-o", str(tmp_path / "hf"),
                 "--bos-token", BOS, "--eos-token", EOS]) == 0
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    docs = texts()[:100]
    assert [auto(doc)["input_ids"] for doc in docs] == \
        tok.encode_batch(docs, add_special_tokens=True, allowed_special="all")


def test_skip_special_tokens_decodes_as_hf_does(llama3_hf):
    """HF's ``decode(ids, skip_special_tokens=True)`` (its default) leaves out the added
    tokens it calls special and keeps the others."""
    hf = tokenizers.Tokenizer.from_str(json.dumps(llama3_hf))
    hf.add_tokens([tokenizers.AddedToken("<keep>", special=False)])
    tok = gpubpe.Tokenizer.from_hf(json.loads(hf.to_str()))
    specials = [BOS, EOS, "<keep>", "<|reserved_special_token_3|>"]
    docs = [f"{d}{specials[i % len(specials)]} x" for i, d in enumerate(texts())]
    batch = [e.ids for e in hf.encode_batch(docs)]
    assert batch == tok.encode_batch(docs, allowed_special="all", add_special_tokens=True)
    want = hf.decode_batch(batch, skip_special_tokens=True)
    assert want != hf.decode_batch(batch, skip_special_tokens=False)
    assert "<keep>" in want[2]
    assert tok.decode_batch(batch, skip_special_tokens=True) == want
    assert tok.decode_batch(tok.encode_arrays(docs, allowed_special="all",
                                              add_special_tokens=True),
                            skip_special_tokens=True, num_threads=2) == want
    assert [tok.decode(ids, skip_special_tokens=True) for ids in batch[:50]] == want[:50]
    assert [tok.decode(np.array(ids), skip_special_tokens=True)
            for ids in batch[-20:]] == want[-20:]
    gpu = tok.with_backend("cuda")
    on_device = gpu.encode_arrays(docs[:30], allowed_special="all", device=True,
                                  add_special_tokens=True)
    assert gpu.decode_batch(on_device, skip_special_tokens=True) == want[:30]
    with pytest.raises(ValueError, match="id 999999999"):
        tok.decode([1, 999999999], skip_special_tokens=True)
    with pytest.raises(ValueError, match="id 999999999"):
        tok.decode_batch([[BOS_ID], [1, 999999999]], skip_special_tokens=True)


def test_a_bit_level_tokenizer_frames_and_skips_like_its_base():
    vocab = gpubpe.train([DEMO], 300, special_tokens=["<s>", "</s>"], progress=False).vocabulary
    vocab.template = Template(("<s>",), ("</s>",))
    base = gpubpe.Tokenizer(vocab)
    coded = base.with_bitlevel()
    assert coded.template == base.template
    docs = ["中文 hello", "", "日本語"]
    batch = coded.encode_batch(docs, add_special_tokens=True)
    assert [ids[0] for ids in batch] == [300] * 3 and [ids[-1] for ids in batch] == [301] * 3
    assert coded.decode_batch(batch, skip_special_tokens=True) == docs
    assert coded.decode_batch(batch) == [f"<s>{d}</s>" for d in docs]
    assert coded.decode(batch[0], skip_special_tokens=True) == docs[0]


def test_with_template_on_a_trained_tokenizer(tmp_path, capsys):
    tok = gpubpe.train([DEMO], 400, special_tokens=["<|endoftext|>", "<s>"], progress=False)
    assert tok.template is None
    framed = tok.with_template(before=["<s>"], after=["<|endoftext|>"])
    docs = texts()[:100]
    assert framed.encode_batch(docs, add_special_tokens=True) == [
        [401, *ids, 400] for ids in tok.encode_batch(docs)]
    framed.save(tmp_path / "t.json")
    assert gpubpe.load(tmp_path / "t.json").template == Template(("<s>",), ("<|endoftext|>",))
    hf = tokenizers.Tokenizer.from_str(json.dumps(framed.to_hf_json()))
    assert [e.ids for e in hf.encode_batch(docs)] == framed.encode_batch(
        docs, add_special_tokens=True, allowed_special="all")
    assert framed.with_template().template is None
    with pytest.raises(gpubpe.errors.ConfigError, match="'</s>' is not a special token"):
        tok.with_template(after=["</s>"])
    # tiktoken's format has no template: the export says what to add
    assert main(["export", "-t", str(tmp_path / "t.json"), "-o", str(tmp_path / "t.tiktoken")]) == 0
    assert "tiktoken has no template: put ['<s>'] before and ['<|endoftext|>'] after" in \
        capsys.readouterr().err
