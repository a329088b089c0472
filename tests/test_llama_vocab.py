"""Meta's own Llama 3 and Llama 4 vocabularies, which no one here made (``llama-models``
ships their ``tokenizer.model`` files and builds tiktoken Encodings from them).

- Llama 3: 128,000 ranks, 256 special tokens, its own split pattern (cl100k's without
  possessive quantifiers, with o200k's whitespace alternatives), run by gpubpe's Numba
  scanner (until session 16 it went through ``regex``: 0.5-1.0x tiktoken);
- Llama 4: 200,000 ranks, 2,048 special tokens, o200k's pattern;

against Meta's Encodings: ids on real multilingual documents and generated text, special
tokens, decoding, the HF export of the import against HF ``tokenizers``, and the
tokenizer.json that transformers' TikTokenConverter makes of Meta's Llama 3 file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpubpe
from gpubpe.pretokenize import LLAMA3_PATTERN, NAMED_PATTERNS

pytest.importorskip("llama_models", reason="Meta's Llama vocabularies need the 'dev' extra")

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [ROOT / "tests" / "data" / "multiscript.txt", ROOT / "gpubpe" / "data" / "demo.txt"]
# Where Llama 3's pattern and cl100k's split differently: whitespace reaching the end after
# a CR/LF (and inside a text, where they agree).
WHITESPACE_ENDS = ["a \n ", "x\n\n  ", "tab\t\r\n\t", "a \n\n b", "end\n", " \u3000\n\u3000"]


@pytest.fixture(scope="module", params=["llama3", "llama4"])
def meta(request):
    """(Meta's tiktoken Encoding, gpubpe's import of it)."""
    if request.param == "llama3":
        from llama_models.llama3.tokenizer import Tokenizer
    else:
        from llama_models.llama4.tokenizer import Tokenizer
    encoding = Tokenizer.get_instance().model
    return encoding, gpubpe.Tokenizer.from_tiktoken(encoding)


def documents() -> list[str]:
    lines = [line for path in TEXTS
             for line in path.read_text(encoding="utf-8").splitlines(keepends=True)]
    return ["".join(lines[at:at + 25]) for at in range(0, len(lines), 25)][:600]


def test_the_patterns_are_named_and_scanned(meta):
    encoding, tok = meta
    name = {LLAMA3_PATTERN: "llama3", NAMED_PATTERNS["o200k"]: "o200k"}[encoding._pat_str]
    assert tok.vocabulary.pattern == name
    assert tok._scanner is not None  # the Numba scanner, not regex
    assert tok.n_vocab == encoding.n_vocab


def test_ids_equal_metas_on_real_documents(meta):
    encoding, tok = meta
    docs = documents() + WHITESPACE_ENDS
    expected = encoding.encode_ordinary_batch(docs)
    assert tok.encode_arrays(docs).tolist() == expected
    assert tok.encode_batch(docs, num_threads=1) == expected
    assert tok.decode_batch(expected) == docs


@settings(max_examples=60)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=120)
       | st.lists(st.sampled_from(["a", " ", "\n", "\r\n", "\t", "'S", "1234", ".", "\u3000",
                                   "中文", "Ünï", "\u0301"]), max_size=30).map("".join))
def test_ids_equal_metas_on_generated_text(meta, text):
    encoding, tok = meta
    assert tok.encode(text) == encoding.encode_ordinary(text)


def test_special_tokens(meta):
    encoding, tok = meta
    assert tok.special_tokens == encoding._special_tokens
    text = "<|begin_of_text|>hi<|eot_id|>\n<|reserved_special_token_100|>"
    assert tok.encode(text, allowed_special="all") == encoding.encode(text, allowed_special="all")
    assert tok.decode(encoding.encode(text, allowed_special="all")) == text
    with pytest.raises(gpubpe.errors.SpecialTokenError,
                       match=re.escape("'<|begin_of_text|>' at character 2")):
        tok.encode("hi<|begin_of_text|>")


def test_hf_export_gives_metas_ids(meta, tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="HF parity needs the 'dev' extra")
    encoding, tok = meta
    tok.to_hf(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    docs = documents()[:100] + WHITESPACE_ENDS
    expected = encoding.encode_ordinary_batch(docs)
    assert [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)] == expected
    again = gpubpe.Tokenizer.from_hf(tmp_path / "tokenizer.json")  # the Split read back by name
    assert again.vocabulary.pattern == tok.vocabulary.pattern and again._scanner is not None
    assert again.encode_arrays(docs).tolist() == expected


def test_transformers_conversion_of_metas_file_gives_metas_ids(tmp_path):
    """transformers' own TikTokenConverter (how the HF Llama 3 tokenizer.json is made) turns
    Meta's file into a tokenizer.json: gpubpe imports it with the Llama 3 scanner."""
    import inspect

    converter = pytest.importorskip("transformers.convert_slow_tokenizer",
                                    reason="the converter needs the 'dev' extra")
    from llama_models.llama3 import tokenizer as llama3

    meta = llama3.Tokenizer.get_instance()
    specials = list(meta.special_tokens)
    accepts = inspect.signature(converter.TikTokenConverter.__init__).parameters
    keyword = "extra_special_tokens" if "extra_special_tokens" in accepts else \
        "additional_special_tokens"
    converted = converter.TikTokenConverter(
        vocab_file=str(Path(llama3.__file__).parent / "tokenizer.model"), pattern=meta.pat_str,
        **{keyword: specials}).converted()
    converted.save(str(tmp_path / "tokenizer.json"))
    tok = gpubpe.Tokenizer.from_hf(tmp_path / "tokenizer.json")
    assert tok.vocabulary.pattern == "llama3" and tok._scanner is not None
    docs = documents()[:200] + WHITESPACE_ENDS
    assert tok.encode_arrays(docs).tolist() == meta.model.encode_ordinary_batch(docs)
    text = "<|begin_of_text|>hi<|eot_id|>"
    assert tok.encode(text, allowed_special="all") == \
        meta.model.encode(text, allowed_special="all") == [128000, 6151, 128009]
