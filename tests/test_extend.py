"""Extending a vocabulary: equal to the reference trainer continued from the same rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference
from gpubpe.cli import demo_corpus_path, main
from gpubpe.counts import WordCounts, count_words
from gpubpe.errors import ConfigError, ModelFormatError
from gpubpe.extend import apply_rules_in_order
from gpubpe.model import Vocabulary

SMALL_WORDS = st.dictionaries(
    st.binary(min_size=1, max_size=8).map(lambda b: bytes(97 + x % 4 for x in b)),
    st.integers(1, 9), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """A base corpus (prose) and a domain corpus (the doc's code-heavy tail)."""
    folder = tmp_path_factory.mktemp("extend")
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)
    base, domain = folder / "base.txt", folder / "domain.txt"
    base.write_text("".join(lines[:2000]), encoding="utf-8")
    domain.write_text("".join(lines[-1500:]), encoding="utf-8")
    return base, domain


def test_extend_equals_reference_continued(corpora):
    base_path, domain_path = corpora
    base = gpubpe.train([base_path], 400, progress=False)
    counts = count_words([domain_path], progress=False)
    extended = gpubpe.train(counts=counts, extend=base, add=150, progress=False)
    expected = _reference.continue_bpe(counts.as_dict(), base.vocabulary.rules.tolist(), 550)
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == expected
    assert extended.vocab_size == 550


@pytest.mark.filterwarnings("ignore:extending stopped")  # small word sets run out of pairs
@given(SMALL_WORDS, SMALL_WORDS, st.integers(257, 270), st.integers(1, 20))
def test_extend_equals_reference_on_random_words(base_words, new_words, size, add):
    base = gpubpe.Tokenizer(Vocabulary.from_rules(_reference.train_bpe(base_words, size),
                                                  pattern=None))
    counts = WordCounts.from_dict(new_words, pattern=None)
    extended = gpubpe.train(counts=counts, extend=base, add=add, pattern=None, progress=False)
    expected = _reference.continue_bpe(new_words, base.vocabulary.rules.tolist(),
                                       base.vocab_size + add)
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == expected


@given(SMALL_WORDS, st.integers(257, 275), st.integers(0, 15))
def test_training_to_n_then_extending_equals_training_at_n_plus_k(words, size, add):
    # On its own corpus, a BPE run is a prefix of a longer one (the reference says so too).
    rules = _reference.train_bpe(words, size)
    assert _reference.continue_bpe(words, rules, size + add) == \
        _reference.train_bpe(words, size + add)


def test_old_ids_keep_their_meaning(corpora):
    base_path, domain_path = corpora
    base = gpubpe.train([base_path], 500, progress=False)
    extended = gpubpe.train(counts=count_words([domain_path], progress=False), extend=base,
                            add=300, progress=False)
    assert [extended.token_bytes(i) for i in range(500)] == \
        [base.token_bytes(i) for i in range(500)]
    text = domain_path.read_text(encoding="utf-8")[:20000]
    old_ids, new_ids = base.encode(text), extended.encode(text)
    assert extended.decode(new_ids) == text == base.decode(old_ids)
    assert len(new_ids) < len(old_ids)  # the domain's own merges compress it better
    new = [i for i in new_ids if i >= 500]
    assert new and all(len(extended.token_bytes(i)) > 1 for i in new)
    kept = {i for i in new_ids if i < 500}
    assert all(extended.token_bytes(i) == base.token_bytes(i) for i in kept)


def test_rules_applied_in_training_order_not_by_encoding():
    # Rules: ab(256), bc(257), a+bc -> abc(258), then ab + c -> abc again (rank 3).
    # "abc" by training order: ab first -> [ab, c] -> rule 3 applies -> [abc].
    rules = np.array([(97, 98, 256), (98, 99, 257), (97, 257, 258), (256, 99, 258)])
    tokens, _, word_len, _ = apply_rules_in_order({b"abc": 1, b"xbc": 2}, rules, 259)
    assert tokens.tolist() == [258, 120, 257] and word_len.tolist() == [1, 2]


@given(SMALL_WORDS, SMALL_WORDS, st.integers(257, 290))
def test_word_encoder_path_equals_rule_order_path(base_words, words, size):
    from gpubpe.extend import _encoded_words, _words_in_rule_order

    rules = np.array(_reference.train_bpe(base_words, size), np.int64).reshape(-1, 3)
    fast, slow = _encoded_words(list(words), rules), _words_in_rule_order(list(words), rules)
    assert fast[0].tolist() == slow[0].tolist() and fast[1].tolist() == slow[1].tolist()


def test_extend_from_hf_and_tiktoken_files(corpora, tmp_path):
    base_path, domain_path = corpora
    base = gpubpe.train([base_path], 400, progress=False)
    counts = count_words([domain_path], progress=False)
    expected = gpubpe.train(counts=counts, extend=base, add=100, progress=False).merges
    base.to_hf(tmp_path / "tokenizer.json")
    assert gpubpe.train(counts=counts, extend=tmp_path / "tokenizer.json", add=100,
                        progress=False).merges == expected
    # A tiktoken encoding imports with tiktoken's own rule (every split of a token at its
    # rank, whole tokens first): a layout of its own, which extend refuses for now.
    with pytest.raises(ConfigError, match="its own id layout"):
        gpubpe.train(counts=counts, extend=base.to_tiktoken(), add=100, progress=False)


def test_cli_extend(corpora, tmp_path):
    base_path, domain_path = corpora
    assert main(["train", str(base_path), "--vocab-size", "400", "-o", str(tmp_path / "b.json"),
                 "--no-progress"]) == 0
    assert main(["count", str(domain_path), "-o", str(tmp_path / "d.counts"),
                 "--no-progress"]) == 0
    assert main(["train", "--counts", str(tmp_path / "d.counts"), "--extend",
                 str(tmp_path / "b.json"), "--add", "100", "-o", str(tmp_path / "e.json"),
                 "--no-progress"]) == 0
    extended = gpubpe.load(tmp_path / "e.json")
    assert extended.vocab_size == 500 and extended.metadata["extended_from"] == 400


# ---------------------------------------------------------------- refusals


def test_non_byte_level_vocabulary_is_refused(tmp_path):
    from tokenizers import Tokenizer, models

    path = tmp_path / "wordpiece.json"
    Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(path))
    counts = WordCounts.from_dict({b"ab": 1})
    with pytest.raises(ModelFormatError, match="needs a byte-level BPE vocabulary.*WordPiece"):
        gpubpe.train(counts=counts, extend=path, add=10, progress=False)
    code = main(["train", "--counts", _saved(counts, tmp_path), "--extend", str(path),
                 "--add", "10", "-o", str(tmp_path / "x.json")])
    assert code == 2


def _saved(counts, tmp_path):
    counts.save(tmp_path / "c.counts")
    return str(tmp_path / "c.counts")


def test_counts_of_other_pattern_or_special_tokens_are_refused(corpora):
    base = gpubpe.train([corpora[0]], 300, progress=False)
    with pytest.raises(ConfigError, match="made with pattern 'cl100k'"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}, pattern="cl100k"), extend=base,
                     add=5, progress=False)
    with pytest.raises(ConfigError, match=r"special tokens \['<s>'\], the base has \[\]"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}, special_tokens=["<s>"]),
                     extend=base, add=5, progress=False)


def test_bases_whose_ids_would_move_are_refused(corpora):
    counts = WordCounts.from_dict({b"ab": 1}, special_tokens=["<|endoftext|>"])
    with_special = gpubpe.train([corpora[0]], 300, special_tokens=["<|endoftext|>"],
                                progress=False)
    with pytest.raises(ConfigError, match="output-id tables"):
        gpubpe.train(counts=counts, extend=with_special, add=5, progress=False)
    scaffold = gpubpe.train([corpora[0]], 300, scaffold=True, progress=False)
    with pytest.raises(ConfigError, match="Scaffold-BPE"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}), extend=scaffold, add=5,
                     progress=False)
    with pytest.raises(ConfigError, match="add="):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}), extend=scaffold, add=0,
                     progress=False)


def test_extend_json_keeps_metadata(corpora, tmp_path):
    base = gpubpe.train([corpora[0]], 300, progress=False)
    counts = count_words([corpora[1]], progress=False)
    extended = gpubpe.train(counts=counts, extend=base, add=20, progress=False)
    extended.save(tmp_path / "e.json")
    meta = json.loads((tmp_path / "e.json").read_text())["metadata"]
    assert meta["counts_fingerprint"] == counts.fingerprint and meta["extended_from"] == 300


def test_gpt2_byte_ids_follow_the_tie_order_extend_uses():
    # extend breaks ties as training does: byte tokens by HF's rank. GPT-2's vocab.json numbers
    # its bytes in bytes_to_unicode's order, so for GPT-2 (and HF-trained files) that rank is
    # the imported vocabulary's own id order, as the issue asks.
    gpt2_id_of_byte = {byte: i for i, byte in enumerate(_reference.gpt2_byte_to_unicode())}
    assert [gpt2_id_of_byte[b] for b in range(256)] == _reference.hf_byte_rank()


def test_extend_takes_the_bases_pattern(corpora):
    base = gpubpe.train([corpora[0]], 300, pattern="cl100k", progress=False)
    counts = count_words([corpora[1]], pattern="cl100k", progress=False)
    extended = gpubpe.train(counts=counts, extend=base, add=20, progress=False)
    assert extended.vocabulary.pattern == "cl100k" and extended.vocab_size == 320
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == _reference.continue_bpe(
        counts.as_dict(), base.vocabulary.rules.tolist(), 320)


def test_imports_whose_ids_would_change_are_refused(corpora, tmp_path):
    # A HF BpeTrainer file numbers bytes by their GPT-2 character's code point, not by value:
    # extending it would renumber them, so it is refused until imports keep their own ids.
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.train([str(corpora[0])], trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    hf.save(str(tmp_path / "hf.json"))
    counts = count_words([corpora[1]], progress=False)
    with pytest.raises(ConfigError, match="its own id layout"):
        gpubpe.train(counts=counts, extend=tmp_path / "hf.json", add=10, progress=False)
    imported = gpubpe.Tokenizer.from_hf(tmp_path / "hf.json")  # keeps HF's ids: a layout
    with pytest.raises(ConfigError, match="its own id layout"):
        gpubpe.train(counts=counts, extend=imported, add=10, progress=False)
    import tiktoken

    gpt2_order = list(_reference.gpt2_byte_to_unicode())  # GPT-2's byte ids
    encoding = tiktoken.Encoding("bytes-gpt2-order", pat_str=r"\S+|\s+",
                                 mergeable_ranks={bytes([b]): i for i, b in enumerate(gpt2_order)},
                                 special_tokens={})
    with pytest.raises(ConfigError, match="its own id layout"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}, pattern=r"\S+|\s+"),
                     extend=encoding, add=10, progress=False)
