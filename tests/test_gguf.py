"""GGUF files (llama.cpp's model format): their tokenizer, imported with HF's ids.

- llama.cpp's own vocabulary files and test vectors (``models/ggml-vocab-*.gguf`` with
  ``.inp`` texts and ``.out`` ids, in the llama-cpp-python 0.3.36 sdist on PyPI; its
  convert_hf_to_gguf_update.py wrote each ``.out`` with HF's ``AutoTokenizer.encode(text,
  add_special_tokens=False)`` on the model's own tokenizer.json): eleven byte-level BPE
  vocabularies no one here made (GPT-2, MPT, StarCoder, Refact, Command-R, DeepSeek Coder
  and LLM, Falcon, Llama 3, Qwen 2, Qwen 3.5) and three SentencePiece BPE (Llama 2, Phi-3,
  Gemma 4);
  HF's tokenizers running the tokenizer.json gpubpe
  reads each as gives those ids too, and gpubpe gives HF's on documents in many scripts;
  the files gpubpe refuses, by what they are;
- the metadata against llama.cpp's own reader (the ``gguf`` package);
- a file written by llama.cpp's own writer from DeepSeek V3's HF file, as its converter
  writes them, against HF on real documents (no download needed);
- malformed files: errors that say what is wrong.

The sdist (76 MB, pinned by its sha256) is fetched once into ``~/.cache/gpubpe-tests``;
``GPUBPE_LLAMA_CPP_MODELS`` may name a llama.cpp ``models/`` folder instead. Offline and
without either, the tests that need it skip, saying so.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from pinned import pinned_folder
from test_real_vocab import two_kb_documents as documents
from test_split_sequence import CORPUS, DEMO, EDGES, deepseek_file, hf_ids  # noqa: F401

import gpubpe
from gpubpe.bytes_order import BYTE_TO_CHAR
from gpubpe.cli import main
from gpubpe.errors import ConfigError, ModelFormatError
from gpubpe.gguf import hf_tokenizer_json, read_metadata

gguf = pytest.importorskip("gguf", reason="needs the 'dev' extra (llama.cpp's gguf package)")
tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")

SDIST_URL = ("https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f"
             "6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz")
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# The BPE files llama.cpp ships test vectors for, and the pattern each imports as: eleven
# byte-level, and three SentencePiece BPE (Llama 2's vocabulary, Phi-3's, Gemma 4's: "▁"
# for spaces, <0xXX> byte fallback, no split: cut where no token joins, ``JOINS``).
WITH_VECTORS = {"gpt-2": "gpt2", "mpt": "gpt2", "starcoder": "starcoder", "refact": "starcoder",
                "command-r": "starcoder", "deepseek-coder": "deepseek-coder",
                "deepseek-llm": "deepseek-llm", "llama-bpe": "llama3", "qwen2": "qwen2",
                "qwen35": "qwen35", "falcon": None,  # Falcon's: steps on bytes, in regex
                "llama-spm": None, "phi-3": None, "gemma-4": None}
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5


# ------------------------------------------------------------ llama.cpp's files

@pytest.fixture(scope="module")
def models() -> Path:
    given = os.environ.get("GPUBPE_LLAMA_CPP_MODELS")
    if given:
        return Path(given)
    return pinned_folder("llama-cpp-python-0.3.36-models", SDIST_URL, SDIST_SHA256,
                         vocab_file_name, "llama.cpp's vocab files (set GPUBPE_LLAMA_CPP_MODELS "
                         "to a llama.cpp models/ folder)")


def vocab_file_name(member: str) -> str | None:
    """The sdist's ``vendor/llama.cpp/models/ggml-vocab-*`` files, by their names alone."""
    return Path(member).name if "/models/ggml-vocab-" in member else None


def vectors(models: Path, name: str) -> tuple[list[str], list[list[int]]]:
    """llama.cpp's test texts for a vocabulary and HF's ids for each."""
    stem = models / f"ggml-vocab-{name}.gguf"
    texts = stem.with_suffix(".gguf.inp").read_text(encoding="utf-8")
    texts = texts.split("\n__ggml_vocab_test__\n")[:-1]
    lines = stem.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")
    return texts, [[int(i) for i in line.split()] for line in lines[:len(texts)]]


@pytest.mark.parametrize("name", sorted(WITH_VECTORS))
def test_llama_cpp_vocab_files_give_hfs_ids(models, name):
    path = models / f"ggml-vocab-{name}.gguf"
    tok = gpubpe.Tokenizer.from_gguf(path)
    texts, want = vectors(models, name)
    assert len(texts) >= 45
    assert [tok.encode(text) for text in texts] == want  # no special token is in them
    assert tok.encode_batch(texts, allowed_special="all", num_threads=2) == want
    if WITH_VECTORS[name]:  # a named pattern: a Numba scanner
        assert tok.vocabulary.pattern == WITH_VECTORS[name]
    nfc = name == "qwen2"  # Qwen 2's file normalizes to NFC (3.5's does not: see its .inp)
    assert tok.decode_batch(want) == [unicodedata.normalize("NFC", t) if nfc else t
                                      for t in texts]
    # The vectors are 46 short texts (Qwen 2's and 3.5's splits give the same ids on them):
    # HF runs the tokenizer.json gpubpe reads the file as, which gives the vectors' ids
    # too, and gpubpe gives its ids on ~400 KB of documents in many scripts.
    hf = tokenizers.Tokenizer.from_str(json.dumps(hf_tokenizer_json(read_metadata(path),
                                                                    str(path))))
    assert hf_ids(hf, texts) == want
    documents_ = documents(CORPUS, 150) + documents(DEMO, 50)
    assert tok.encode_batch(documents_, allowed_special="all") == hf_ids(hf, documents_)


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "gemma-4"])
def test_sentencepiece_files_export_as_a_tokenizer_json_hf_reads(models, name, tmp_path):
    """``gpubpe export -t model.gguf -o folder``: HF's tokenizers on the written file gives
    the vectors' ids, and gpubpe's on documents."""
    tok = gpubpe.Tokenizer.from_gguf(models / f"ggml-vocab-{name}.gguf")
    assert main(["export", "-t", str(models / f"ggml-vocab-{name}.gguf"),
                 "-o", str(tmp_path)]) == 0
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts, want = vectors(models, name)
    assert hf_ids(hf, texts) == want
    documents_ = documents(CORPUS, 40)
    assert hf_ids(hf, documents_) == tok.encode_batch(documents_)


def test_a_file_without_a_named_split_takes_a_pattern(models):
    neox = models / "ggml-vocab-gpt-neox.gguf"  # converted before llama.cpp named splits
    with pytest.raises(ModelFormatError, match=r"'default'.*pattern=.*names read: command-r"):
        gpubpe.Tokenizer.from_gguf(neox)
    tok = gpubpe.Tokenizer.from_gguf(neox, pattern="gpt2")
    texts, want = vectors(models, "mpt")  # MPT's tokenizer is GPT-NeoX-20B's
    assert tok.encode_batch(texts, allowed_special="all") == want
    with pytest.raises(ConfigError, match=r"pattern='\(x': .*valid regex"):
        gpubpe.Tokenizer.from_gguf(neox, pattern="(x")


@pytest.mark.parametrize("name, what", [
    ("bert-bge", "WordPiece"), ("nomic-bert-moe", "Unigram")])
def test_other_tokenizers_are_refused_by_what_they_are(models, name, what):
    with pytest.raises(ModelFormatError, match=what):
        gpubpe.load(models / f"ggml-vocab-{name}.gguf")


def test_metadata_equals_llama_cpps_reader(models):
    path = models / "ggml-vocab-qwen35.gguf"
    ours = read_metadata(path)
    theirs = {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items()
              if not key.startswith("GGUF.")}
    assert ours.keys() == theirs.keys()
    assert ours == theirs
    assert len(ours["tokenizer.ggml.tokens"]) > 150_000


def test_load_and_the_cli_read_a_gguf_file(models, capsys):
    path = models / "ggml-vocab-starcoder.gguf"
    texts, want = vectors(models, "starcoder")
    assert gpubpe.load(path).encode(texts[-1]) == want[-1]
    assert main(["encode", "-t", str(path), "--text", texts[-1]]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in want[-1]]


# ------------------------------------------------------------ written by llama.cpp's writer

def write_gguf(path: Path, tokens, kinds=None, merges=(), pre="gpt-2", model="gpt2") -> Path:
    writer = gguf.GGUFWriter(path, "llama")
    if model is not None:
        writer.add_tokenizer_model(model)
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(kinds or [NORMAL] * len(tokens))
        writer.add_token_merges(list(merges))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def written_like_convert_hf_to_gguf(hf_file: Path, path: Path, pre: str) -> Path:
    """A vocab-only GGUF of a HF tokenizer.json as llama.cpp's convert_hf_to_gguf.py writes
    it: every id (a gap is an unused "[PADn]"), added tokens as their text, control (special)
    or user-defined, merges as "left right"."""
    hf = tokenizers.Tokenizer.from_file(str(hf_file))
    by_id = {i: text for text, i in hf.get_vocab(with_added_tokens=True).items()}
    added = hf.get_added_tokens_decoder()
    tokens, kinds = [], []
    for i in range(max(by_id) + 1):
        if i in added:
            tokens.append(added[i].content)
            kinds.append(CONTROL if added[i].special else USER_DEFINED)
        else:
            tokens.append(by_id.get(i, f"[PAD{i}]"))
            kinds.append(NORMAL if i in by_id else UNUSED)
    merges = json.loads(hf_file.read_text(encoding="utf-8"))["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return write_gguf(path, tokens, kinds, merges, pre)


def test_deepseek_v3_written_as_gguf_gives_hfs_ids(deepseek_file, tmp_path):  # noqa: F811
    path = written_like_convert_hf_to_gguf(deepseek_file, tmp_path / "deepseek.gguf",
                                           "deepseek-v3")
    tok = gpubpe.Tokenizer.from_gguf(path)
    hf = tokenizers.Tokenizer.from_file(str(deepseek_file))
    assert tok.vocabulary.pattern == "deepseek"
    texts = documents(CORPUS, 60) + EDGES + ["<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>"]
    assert tok.encode_batch(texts, allowed_special="all") == hf_ids(hf, texts)
    assert tok.n_vocab == hf.get_vocab_size()


def tiny_tokens() -> tuple[list[str], list[str]]:
    """GPT-2's byte characters, "ab" and " ab" by two merges, an end-of-text token."""
    return [*BYTE_TO_CHAR, "ab", "Ġab", "<|end|>"], ["a b", "Ġ ab"]


def test_added_and_unused_tokens_keep_their_ids(tmp_path):
    tokens, merges = tiny_tokens()
    tokens += ["[PAD260]", "  "]
    kinds = [NORMAL] * 258 + [CONTROL, UNUSED, USER_DEFINED]
    tok = gpubpe.Tokenizer.from_gguf(write_gguf(tmp_path / "t.gguf", tokens, kinds, merges))
    assert tok.encode("ab ab<|end|>x  ab", allowed_special="all") == [256, 257, 258, 120, 260,
                                                                       256]
    assert tok.decode([256, 257, 258, 260]) == "ab ab<|end|>  "
    # A user-defined token is no special token: matched always, as HF matches it.
    assert tok.encode("x  ab") == tok.encode("x  ab", disallowed_special=()) == [120, 260, 256]
    with pytest.raises(gpubpe.errors.SpecialTokenError, match="'<|end|>'"):
        tok.encode("x<|end|>")


def test_deepseek_coders_added_letters_are_matched_as_hf_matches_them(models):
    """DeepSeek Coder's file adds "ö", "ü", "ø"... as tokens HF does not call special:
    German text must not raise, and gets HF's ids whatever ``disallowed_special`` says."""
    path = models / "ggml-vocab-deepseek-coder.gguf"
    tok = gpubpe.Tokenizer.from_gguf(path)
    hf = tokenizers.Tokenizer.from_str(json.dumps(hf_tokenizer_json(read_metadata(path),
                                                                    str(path))))
    texts = ["Malmö, Zürich, Ærø", "Grüße aus Köln<｜end▁of▁sentence｜>"]
    want = hf_ids(hf, texts)
    assert tok.encode(texts[0]) == tok.encode(texts[0], disallowed_special=()) == want[0]
    assert tok.encode_batch(texts, allowed_special="all") == want
    with pytest.raises(gpubpe.errors.SpecialTokenError, match="end▁of▁sentence"):
        tok.encode(texts[1])
    exported = tokenizers.Tokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert hf_ids(exported, texts) == want
    # Decoded, such a token is its text. HF's ByteLevel decoder reads an added token's text
    # as byte stand-ins too ("ö" stands for byte F6), so HF gives U+FFFD for each: a
    # difference kept on purpose (found by bench/parity_fuzz.py).
    assert tok.decode(want[0]) == texts[0]
    assert hf.decode(want[0]) == "Malm\ufffd, Z\ufffdrich, \u00c6r\ufffd"


@pytest.mark.parametrize("pre", sorted(gpubpe.gguf._PRE_TOKENIZERS))
def test_every_name_in_the_table_imports_as_hf_runs_it(tmp_path, pre):
    """Each of the 27 names gives a tokenizer whose ids equal HF's running the same
    tokenizer.json, on text where splits differ (the eleven with llama.cpp's files are
    checked against the models' own ids above)."""
    tokens, merges = tiny_tokens()
    path = write_gguf(tmp_path / "t.gguf", tokens, merges=merges, pre=pre)
    tok = gpubpe.Tokenizer.from_gguf(path)
    hf = tokenizers.Tokenizer.from_str(json.dumps(hf_tokenizer_json(read_metadata(path),
                                                                    str(path))))
    texts = ["ab ab  ab\n\n x123456 y's 中文。ab", "e\u0301 ＡＢ　ab\t\r\n!!ab 1.5"]
    assert tok.encode_batch(texts) == hf_ids(hf, texts)


def test_a_pattern_may_replace_the_named_split(tmp_path):
    tokens, merges = tiny_tokens()
    path = write_gguf(tmp_path / "t.gguf", tokens, merges=merges, pre="my-model")
    with pytest.raises(ModelFormatError, match="'my-model': the name is not in"):
        gpubpe.Tokenizer.from_gguf(path)
    assert gpubpe.Tokenizer.from_gguf(path, pattern="gpt2").encode("ab ab") == [256, 257]
    assert gpubpe.Tokenizer.from_gguf(path, pattern=r"\S+|\s").encode("ab ab") == [256, 32, 256]


def test_metadata_of_every_type_is_read_as_llama_cpps_reader_reads_it(tmp_path):
    """A model file holds more than its tokenizer (numbers of every width, floats, flags, a
    chat template, lists), and tensors after it; all of it is read past, none of it
    misread: the values equal llama.cpp's own reader's."""
    kinds = gguf.GGUFValueType
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    for key, value, kind in [("a.u8", 255, kinds.UINT8), ("a.i8", -128, kinds.INT8),
                             ("a.u16", 65535, kinds.UINT16), ("a.i16", -2, kinds.INT16),
                             ("a.u32", 2**32 - 1, kinds.UINT32), ("a.i32", -3, kinds.INT32),
                             ("a.f32", 0.5, kinds.FLOAT32), ("a.bool", True, kinds.BOOL),
                             ("a.u64", 2**64 - 1, kinds.UINT64), ("a.i64", -(2**63), kinds.INT64),
                             ("a.f64", 1e-300, kinds.FLOAT64),
                             ("tokenizer.chat_template", "{% for m in messages %}é中{% endfor %}",
                              kinds.STRING)]:
        writer.add_key_value(key, value, kind)
    writer.add_array("a.floats", [0.25, -1.5])
    writer.add_array("a.strings", ["", "x", "中文"])
    writer.add_array("a.empty", [])
    tokens, merges = tiny_tokens()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    ours = read_metadata(path)
    theirs = {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items()
              if not key.startswith("GGUF.")}
    assert ours == theirs
    assert ours["a.u64"] == 2**64 - 1 and ours["a.strings"] == ["", "x", "中文"]
    assert gpubpe.Tokenizer.from_gguf(path).encode("ab ab") == [256, 257]


def file_bytes(tmp_path, **fields) -> bytes:
    tokens, merges = tiny_tokens()
    return write_gguf(tmp_path / "ok.gguf", tokens, merges=merges, **fields).read_bytes()


@pytest.mark.parametrize("mangle, message", [
    (lambda data: b"GGUX" + data[4:], r"not a GGUF file \(it starts b'GGUX'"),
    (lambda data: data[:len(data) // 2], "metadata ends early.*truncated"),
    (lambda data: data[:4] + (1).to_bytes(4, "little") + data[8:], "GGUF version 1;"),
    (lambda data: data[:4] + (3).to_bytes(4, "big") + data[8:], "version 50331648 .*big-endian"),
    (lambda data: b"", "empty"),
])
def test_malformed_files_say_what_is_wrong(tmp_path, mangle, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(mangle(file_bytes(tmp_path)))
    with pytest.raises(ModelFormatError, match=message):
        gpubpe.Tokenizer.from_gguf(path)


def test_a_file_without_tokens_or_merges_is_refused(tmp_path):
    with pytest.raises(ModelFormatError, match="holds no tokenizer"):
        gpubpe.Tokenizer.from_gguf(write_gguf(tmp_path / "a.gguf", [], model=None))
    tokens, _ = tiny_tokens()
    with pytest.raises(ModelFormatError, match="3 token types for 259 tokens"):
        gpubpe.Tokenizer.from_gguf(write_gguf(tmp_path / "b.gguf", tokens, [NORMAL] * 3))
    with pytest.raises(ModelFormatError, match=r"merge 0 \('a', 'c'\) needs 'ac'"):
        gpubpe.Tokenizer.from_gguf(write_gguf(tmp_path / "c.gguf", tokens, merges=["a c"]))
    with pytest.raises(ModelFormatError, match="no such GGUF file"):
        gpubpe.Tokenizer.from_gguf(tmp_path / "missing.gguf")


def test_bitlevel_report_reads_llama_2s_byte_fallbacks(models, tmp_path, capsys):
    """The paper's Table 3 setting on a real byte-fallback vocabulary (Llama 2's <0xXX>
    tokens are ids 3-258): the byte tokens counted are those ids (not "▁" or "x", one-byte
    characters with tokens of their own), and the codec shortens runs of 3-byte characters
    the vocabulary lacks."""
    from gpubpe.compare import corpus_ids

    path = models / "ggml-vocab-llama-spm.gguf"
    corpus = tmp_path / "zh.txt"
    corpus.write_text("㐀㐁㐂 众 ☃☄ 中文 text\n" * 4, encoding="utf-8")
    tok = gpubpe.Tokenizer.from_gguf(path)
    ids, _ = corpus_ids(tok, [corpus])
    byte_tokens = int(np.isin(ids, tok.vocabulary.layout.byte_fallback_ids).sum())
    assert byte_tokens >= 4 * 15  # 㐀㐁㐂 ☃☄: five characters of three <0xXX> ids each
    assert main(["bitlevel-report", "-t", str(path), str(corpus)]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1].split("|")
    before, after = (int(cell.replace(",", "")) for cell in row[5:7])
    assert before == byte_tokens and after < before


def test_cutting_where_no_token_joins_gives_the_ids_of_each_whole_text(models):
    """Llama 2's vocabulary splits no text: gpubpe cuts it where no token joins two
    characters (``kernels.pretok.JOINS``). The ids must be BPE's over each whole text,
    invalid UTF-8 included (HF takes only str), on the host and on the device (the
    simulator here), whose cuts come from ``is_safe_cut``."""
    from gpubpe.kernels.pretok import GPT2
    from gpubpe.tokenizer import _Scanner

    tok = gpubpe.Tokenizer.from_gguf(models / "ggml-vocab-llama-spm.gguf")
    whole = gpubpe.Tokenizer(tok.vocabulary)  # each text one word, as HF runs it
    whole._scanner, whole._scan, whole._quick = None, _Scanner(GPT2, np.zeros(0, np.uint8)), None
    texts = [t.encode() for t in documents(CORPUS, 30)] + [
        b"\xe4\xb8 \xe4\xb8\xad\xe6 x\xff\xfe\xe4\xb8\xad\xe6\x96\x87\xe4", "ok 中文".encode(),
        "▁中▁文 ▁".encode() + b"\x80\x80\xe4\xb8\xad", "日本語のテキスト、中文。".encode() * 3]
    want = whole.encode_batch(texts)
    assert tok.encode_batch(texts) == want
    assert [tok.encode(text) for text in texts[-4:]] == want[-4:]
    assert tok.with_backend("cuda").encode_batch(texts[-4:]) == want[-4:]


@pytest.mark.parametrize("name", ["llama-spm", "gemma-4"])
def test_a_long_document_is_cut_for_threads_after_its_rewrite(models, name, monkeypatch):
    """A SentencePiece-style text is rewritten first (prefix space, "▁" as a space), so a
    long document is cut for threads after that, in the rewritten text
    (``Tokenizer._cut_source_pieces``): the same ids as one thread and as HF's on it."""
    import gpubpe.tokenizer as tokenizer_module

    path = models / f"ggml-vocab-{name}.gguf"
    tok = gpubpe.Tokenizer.from_gguf(path).with_backend("cpu")
    text = DEMO.read_text(encoding="utf-8")[:150_000] + " ▁▁ 中文▁x" + "日本語 " * 3000
    cuts, build_pieces = [], tokenizer_module.build_pieces_cpu

    def spied(*args):
        found = build_pieces(*args)
        cuts.append(found[0].size)
        return found

    monkeypatch.setattr(tokenizer_module, "build_pieces_cpu", spied)
    two = tok.encode_batch([text, "short ▁ one"], num_threads=2)
    assert cuts and cuts[-1] > 2  # the long document went out in several pieces
    assert two == tok.encode_batch([text, "short ▁ one"], num_threads=1)
    hf = tokenizers.Tokenizer.from_str(json.dumps(hf_tokenizer_json(read_metadata(path),
                                                                    str(path))))
    assert two == hf_ids(hf, [text, "short ▁ one"])


@pytest.mark.parametrize("name, texts", [
    ("starcoder", ["\u0342\U000589fb", "\U000e310d\U0007c2b3", "a\U00058416b"]),  # no F1
    ("falcon", ["\x00\x05\x00", "\n\x0b ", "ab\x05cd", "  \U00011f4c", "x \u2e4f\u2e4f."]),
])
def test_what_a_differential_fuzz_against_hf_found(models, name, texts):
    """Texts a fuzz against HF (random text of many scripts, controls and new letters, on
    every file here) found encoded otherwise: a byte the file has no token for is left
    out before merging (StarCoder's 0xF1, Falcon's 0x05 and 0x0B), and HF's Punctuation
    step is its own old table (U+11F4C and U+2E4F are not punctuation to it)."""
    path = models / f"ggml-vocab-{name}.gguf"
    tok = gpubpe.Tokenizer.from_gguf(path)
    hf = tokenizers.Tokenizer.from_str(json.dumps(hf_tokenizer_json(read_metadata(path),
                                                                    str(path))))
    assert [tok.encode(text) for text in texts] == hf_ids(hf, texts)
    assert tok.encode_batch(texts) == hf_ids(hf, texts)
