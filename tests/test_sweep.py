"""Cutting one training run into many sizes: equal to training at each size directly.

Checked against the reference trainers (BPE and Scaffold-BPE, with the event
log), against the fast trainer, and against HF's BpeTrainer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_gguf import models  # noqa: F401 (a fixture)

import gpubpe
from gpubpe import _reference
from gpubpe.cli import demo_corpus_path, main
from gpubpe.compare import tokenization_stats
from gpubpe.counts import WordCounts, count_words
from gpubpe.errors import ConfigError
from gpubpe.pretokenize import count_words as count_word_dict
from gpubpe.sweep import cut_rules, parse_sizes, sweep, sweep_vocabularies
from gpubpe.trainer import train_from_counts

ARIZONA = ["Arizona"] * 10 + ["zona"] * 2 + ["zon"] * 3
SMALL_WORDS = st.dictionaries(
    st.binary(min_size=1, max_size=8).map(lambda b: bytes(97 + x % 4 for x in b)),
    st.integers(1, 9), min_size=1, max_size=12)


def reference_trainer(word_counts, vocab_size, scaffold, min_frequency=0):
    """The reference trainers in the sweep's trainer interface, with the event log."""
    if not scaffold:
        return np.array(_reference.train_bpe(word_counts, vocab_size), np.int64), None, None
    rows: list = []
    rules, flags = _reference.train_scaffold_bpe(word_counts, vocab_size, event_rows=rows)
    return np.array(rules, np.int64).reshape(-1, 3), np.array(flags), np.array(rows, np.int64)


def as_lists(rules, flags=None):
    rules = [tuple(r) for r in np.asarray(rules).reshape(-1, 3).tolist()]
    return rules if flags is None else (rules, np.asarray(flags, bool).tolist())


# ---------------------------------------------------------------- goldens


def test_golden_arizona_event_log():
    # test_scaffold.py works this run out by hand: rules on(256) zon(257) zona(258)
    # Ar(259) izona(260) Arizona(261); on, zon, zona, Ar, izona marked; zon, zona re-admitted.
    rows: list = []
    _reference.train_scaffold_bpe(count_word_dict(ARIZONA, pattern=None), 259, event_rows=rows)
    assert rows == [(0, 0), (0, 1), (1, 256), (0, 2), (1, 257), (0, 3), (0, 4), (1, 258),
                    (0, 5), (1, 259), (1, 260), (2, 257), (2, 258)]


def test_golden_arizona_cut_at_each_size():
    # |V| after each iteration: 257, 257, 257, 258, 258, 257, 258, 259. It first reaches
    # 258 after Ar (4 rules, on/zon scaffold), 259 only at the end (6 rules).
    word_counts = count_word_dict(ARIZONA, pattern=None)
    rules, flags, events = reference_trainer(word_counts, 259, True)
    for size, n_rules, scaffold_ids in ((257, 1, []), (258, 4, [256, 257]),
                                        (259, 6, [256, 259, 260])):
        cut, cut_flags = cut_rules(rules, events, flags, size)
        assert len(cut) == n_rules
        assert np.flatnonzero(cut_flags).tolist() == scaffold_ids
        assert as_lists(cut, cut_flags) == _reference.train_scaffold_bpe(word_counts, size)


def test_bpe_cut_counts_tokens_not_rules():
    # Rule 3 makes "abc" again (a + bc): it creates no token, so size 259 keeps 3 rules and
    # size 260 keeps 5, not 4.
    rules = [(97, 98, 256), (98, 99, 257), (256, 99, 258), (97, 257, 258), (258, 100, 259)]
    assert len(cut_rules(rules, None, None, 259)[0]) == 3
    assert len(cut_rules(rules, None, None, 260)[0]) == 5
    assert len(cut_rules(rules, None, None, 256)[0]) == 0
    assert len(cut_rules(rules, None, None, 9999)[0]) == 5


def test_bad_event_logs_are_refused():
    rules = np.array([(97, 98, 256)])
    with pytest.raises(ValueError, match="rule 1 appended"):
        cut_rules(rules, [(0, 1)], np.zeros(257, bool), 257)
    with pytest.raises(ValueError, match="other scaffold flags"):
        cut_rules(rules, [(0, 0)], np.ones(257, bool), 300)
    with pytest.raises(ConfigError, match="at least 256"):
        cut_rules(rules, None, None, 100)
    with pytest.raises(ValueError, match="token 97 is not a merged token"):
        cut_rules(rules, [(0, 0), (1, 97)], None, 300)
    with pytest.raises(ValueError, match="twice in a row"):
        cut_rules(rules, [(0, 0), (1, 256), (1, 256)], None, 300)
    with pytest.raises(ValueError, match="unknown event kind 7"):
        cut_rules(rules, [(0, 0), (7, 256)], None, 300)


# ---------------------------------------------------------------- cut == train at N


@given(SMALL_WORDS, st.integers(258, 290))
def test_scaffold_cut_equals_reference_at_every_size(word_counts, largest):
    rules, flags, events = reference_trainer(word_counts, largest, True)
    for size in range(256, largest + 1):
        assert as_lists(*cut_rules(rules, events, flags, size)) == \
            _reference.train_scaffold_bpe(word_counts, size)


@given(SMALL_WORDS, st.integers(258, 290))
def test_bpe_cut_equals_reference_at_every_size(word_counts, largest):
    rules, _, _ = reference_trainer(word_counts, largest, False)
    for size in range(256, largest + 1):
        assert as_lists(cut_rules(rules, None, None, size)[0]) == \
            _reference.train_bpe(word_counts, size)


def test_scaffold_sweep_equals_reference_on_real_text():
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:300]
    word_counts = count_word_dict(lines)
    swept = sweep_vocabularies(word_counts, [280, 320, 360, 400], "scaffold", reference_trainer)
    assert any(np.any(t.scaffold) for t in swept), "this corpus should make scaffold tokens"
    assert [t.cut_from for t in swept] == [400] * 4
    for trained in swept:
        assert as_lists(trained.rules, trained.scaffold) == \
            _reference.train_scaffold_bpe(word_counts, trained.vocab_size)


def test_fast_scaffold_matches_reference_cut():
    # The fast trainer's final state at each size equals the reference run cut there.
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:300]
    word_counts = count_word_dict(lines)
    rules, flags, events = reference_trainer(word_counts, 400, True)
    for size in (280, 320, 360):
        fast_rules, fast_flags = train_from_counts(word_counts, size, scaffold=True,
                                                   progress=False)
        assert as_lists(fast_rules, fast_flags) == as_lists(*cut_rules(rules, events, flags,
                                                                        size))


def test_fast_bpe_sweep_equals_separate_trainings():
    word_counts = count_word_dict([demo_corpus_path()])
    swept = sweep_vocabularies(word_counts, [300, 1000, 3000], "bpe", _fast_trainer)
    for trained in swept:
        direct = train_from_counts(word_counts, trained.vocab_size, progress=False)
        assert np.array_equal(trained.rules, direct)


def _fast_trainer(word_counts, vocab_size, scaffold, min_frequency=0):
    from gpubpe.sweep import fast_trainer

    return fast_trainer()(word_counts, vocab_size, scaffold, min_frequency)


def test_bpe_cuts_equal_hf_bpe_trainer():
    from test_hf_parity import as_hf_strings, hf_merges  # noqa: I001 (tests/ is on sys.path)

    path = demo_corpus_path()
    largest = gpubpe.train([path], 4000, progress=False)
    for size in (300, 1000, 2500, 4000):
        assert as_hf_strings(largest.truncate(size).merges) == hf_merges(path, size)


# ---------------------------------------------------------------- truncate, sweep, CLI


def test_truncate_keeps_ids_and_needs_a_log_for_scaffold():
    tok = gpubpe.train(ARIZONA * 3, 262, pattern=None, progress=False)
    cut = tok.truncate(258)
    assert cut.vocab_size == 258 and cut.encode("zon") == tok.truncate(258).encode("zon")
    assert [cut.token_bytes(i) for i in range(258)] == [tok.token_bytes(i) for i in range(258)]
    with pytest.raises(ConfigError, match="truncate can only cut"):
        tok.truncate(5000)
    scaffold = gpubpe.train(ARIZONA, 259, pattern=None, scaffold=True, progress=False)
    assert scaffold.truncate(258).scaffold_tokens == [b"on", b"zon"]  # training keeps its log
    _, _, events = reference_trainer(count_word_dict(ARIZONA, pattern=None), 259, True)
    assert scaffold.vocabulary.metadata["scaffold_events"] == events.reshape(-1).tolist()
    del scaffold.vocabulary.metadata["scaffold_events"]
    with pytest.raises(ConfigError, match="no event log"):
        scaffold.truncate(258)
    # its own HF export read back has gpubpe's ids: cut as it was trained
    again = gpubpe.Tokenizer.from_hf(tok.to_hf_json())
    assert again.truncate(258).encode("zon arizona") == cut.encode("zon arizona")


REAL_LINES = (demo_corpus_path().read_text(encoding="utf-8").splitlines()[:1500]
              + (Path(__file__).parent / "data" / "multiscript.txt").read_text(
                  encoding="utf-8").splitlines()[:1500])


@pytest.mark.parametrize("size", [300, 1000, 30000])
def test_truncating_cl100k_keeps_tiktokens_ranks_below_the_cut(cl100k, cl100k_tok, size):
    """Cut by id, an import keeps its source's ids (numbered by its rules, GPT-2's "o", 78,
    came back as 111): tiktoken with the ranks below the cut gives the same ids."""
    import tiktoken

    ranks = {piece: rank for piece, rank in cl100k._mergeable_ranks.items() if rank < size}
    small = tiktoken.Encoding("cut", pat_str=cl100k._pat_str, mergeable_ranks=ranks,
                              special_tokens=cl100k._special_tokens)
    cut = cl100k_tok.truncate(size)
    assert cut.vocab_size == size
    assert cut.special_tokens == cl100k_tok.special_tokens
    assert cut.encode_batch(REAL_LINES, disallowed_special=()) == \
        small.encode_ordinary_batch(REAL_LINES)


def test_truncating_a_hf_trained_file_equals_hf_training_at_that_size(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
    from tokenizers import pre_tokenizers, trainers

    def hf_trained(size):
        hf = tokenizers.Tokenizer(tokenizers.models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.train([str(demo_corpus_path())], trainers.BpeTrainer(
            vocab_size=size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=["<|endoftext|>"], show_progress=False))
        return hf

    big, small = hf_trained(3000), hf_trained(1000)
    cut = gpubpe.Tokenizer.from_hf(big.to_str()).truncate(999)  # HF counts its special token
    assert cut.encode_batch(REAL_LINES, allowed_special="all") == \
        [e.ids for e in small.encode_batch(REAL_LINES, add_special_tokens=False)]
    cut.save(tmp_path / "cut.json")
    exported = tokenizers.Tokenizer.from_str(json.dumps(gpubpe.load(tmp_path / "cut.json")
                                                        .to_hf_json()))
    assert [e.ids for e in exported.encode_batch(REAL_LINES)] == \
        [e.ids for e in small.encode_batch(REAL_LINES)]


def test_scaffold_truncate_after_save_equals_training_at_that_size(tmp_path):
    text = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:400]
    largest = gpubpe.train(text, 600, scaffold=True, progress=False)
    largest.save(tmp_path / "tok.json")
    loaded = gpubpe.load(tmp_path / "tok.json")
    for size in (300, 450, 600):
        direct = gpubpe.train(text, size, scaffold=True, progress=False)
        cut = loaded.truncate(size)
        assert cut.merges == direct.merges and cut.scaffold_tokens == direct.scaffold_tokens


def test_sweep_measures_every_size_and_variant(tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(demo_corpus_path().read_text(encoding="utf-8")
                              .splitlines(keepends=True)[:300]), encoding="utf-8")
    held_out = tmp_path / "heldout.txt"
    held_out.write_text("".join(demo_corpus_path().read_text(encoding="utf-8")
                                .splitlines(keepends=True)[300:400]), encoding="utf-8")
    counts = count_words([corpus], progress=False)
    rows = sweep(counts, [300, 400], ["bpe", "scaffold"], [held_out], progress=False,
                 trainer=reference_trainer)
    assert [(r.variant, r.vocab_size) for r in rows] == [
        ("bpe", 300), ("bpe", 400), ("scaffold", 300), ("scaffold", 400)]
    direct = gpubpe.train(counts=counts, vocab_size=300, scaffold=True, progress=False)
    stats = tokenization_stats(direct, [held_out])
    assert rows[2].bytes_per_token == stats["bytes_per_token"]
    assert rows[2].renyi_efficiency == stats["renyi_efficiency"]
    assert rows[2].scaffold_share == len(direct.scaffold_tokens) / \
        len(direct.vocabulary.token_bytes)
    assert rows[0].scaffold_share == 0 and rows[1].bytes_per_token > rows[0].bytes_per_token


def test_sweep_command_writes_json_and_plot(tmp_path, capsys):
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(demo_corpus_path().read_text(encoding="utf-8")
                              .splitlines(keepends=True)[:500]), encoding="utf-8")
    counts_path = tmp_path / "c.counts"
    assert main(["count", str(corpus), "-o", str(counts_path), "--no-progress"]) == 0
    code = main(["sweep", "--counts", str(counts_path), "--vocab-sizes", "300,0.4k",
                 "--variants", "bpe,scaffold", "--eval", str(corpus), "--json",
                 str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png"), "--no-progress"])
    assert code == 0
    rows = json.loads((tmp_path / "s.json").read_text())
    assert [(r["variant"], r["vocab_size"]) for r in rows] == [
        ("bpe", 300), ("bpe", 400), ("scaffold", 300), ("scaffold", 400)]
    assert (tmp_path / "s.png").stat().st_size > 10_000
    assert "| bpe | 400 |" in capsys.readouterr().out


def test_parse_sizes():
    assert parse_sizes("4k,8k,32000,4k") == [4000, 8000, 32000]
    with pytest.raises(ConfigError, match="not a number"):
        parse_sizes("4x")
    with pytest.raises(ConfigError, match="above 256"):
        parse_sizes([100])


def test_counts_trained_sweep_uses_counts_pattern():
    counts = WordCounts.from_dict({b"ab": 3}, pattern="cl100k")
    with pytest.raises(ConfigError, match="pattern 'cl100k'"):
        gpubpe.train(counts=counts, vocab_size=300, progress=False)


def test_fast_trainer_scaffold_sweep_equals_reference():
    # The fast trainer logs events, so every size is cut from the one run at the largest.
    word_counts = count_word_dict(ARIZONA * 2 + ["Arizonan"] * 3, pattern=None)
    swept = sweep_vocabularies(word_counts, [257, 258, 259, 262], "scaffold", _fast_trainer)
    assert [t.cut_from for t in swept] == [262] * 4
    for trained in swept:
        assert as_lists(trained.rules, trained.scaffold) == \
            _reference.train_scaffold_bpe(word_counts, trained.vocab_size)


def test_counts_sweep_on_the_cuda_backend_equals_cpu():
    # NUMBA_ENABLE_CUDASIM=1 (conftest): the real CUDA kernels on NumPy arrays; keep it tiny.
    text = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:15]
    counts = count_words(text, progress=False)
    from gpubpe.backend import resolve_backend
    from gpubpe.sweep import fast_trainer

    for variant in ("bpe", "scaffold"):
        cpu, gpu = (sweep_vocabularies(counts.as_dict(), [262, 280], variant,
                                       fast_trainer(resolve_backend(name)))
                    for name in ("cpu", "cuda"))
        for on_cpu, on_gpu in zip(cpu, gpu):
            assert np.array_equal(on_cpu.rules, on_gpu.rules)
            assert (on_cpu.scaffold is None) == (on_gpu.scaffold is None)
            assert on_cpu.scaffold is None or np.array_equal(on_cpu.scaffold, on_gpu.scaffold)
    tok = gpubpe.train(counts=counts, vocab_size=280, backend="cuda", progress=False)
    assert tok.metadata["backend"] == "cuda"
    assert tok.merges == gpubpe.train(counts=counts, vocab_size=280, progress=False).merges


@pytest.mark.parametrize("name", ["llama-bpe", "deepseek-coder"])
def test_truncating_a_gguf_file_gives_hfs_ids_of_the_file_cut_so(models, name):  # noqa: F811
    """Llama 3's merges (from tiktoken: every split of a token at its rank, parts of later
    ranks too) and DeepSeek Coder's: HF on the file cut by id (the smaller ids, the merges
    among them) gives the cut's ids; a SentencePiece-style file is refused."""
    tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
    from gpubpe.gguf import hf_tokenizer_json, read_metadata

    path = models / f"ggml-vocab-{name}.gguf"
    data = hf_tokenizer_json(read_metadata(path), str(path))
    added = {token["content"] for token in data["added_tokens"]}
    by_id = sorted((i, text) for text, i in data["model"]["vocab"].items() if text not in added)
    keep = {text for _, text in by_id[:2000]} | added
    merges = [m.split(" ") if isinstance(m, str) else m for m in data["model"]["merges"]]
    cut_file = dict(data, model=dict(
        data["model"], vocab={t: i for t, i in data["model"]["vocab"].items() if t in keep},
        merges=[m for m in merges if m[0] in keep and m[1] in keep and m[0] + m[1] in keep]))
    hf = tokenizers.Tokenizer.from_str(json.dumps(cut_file))
    cut = gpubpe.Tokenizer.from_gguf(path).truncate(2000)
    assert cut.encode_batch(REAL_LINES, allowed_special="all") == \
        [e.ids for e in hf.encode_batch(REAL_LINES, add_special_tokens=False)]
    assert cut.decode_batch(cut.encode_batch(REAL_LINES[:200])) == REAL_LINES[:200]
    with pytest.raises(ConfigError, match="SentencePiece-style vocabulary .* is not cut"):
        gpubpe.Tokenizer.from_gguf(models / "ggml-vocab-llama-spm.gguf").truncate(2000)
