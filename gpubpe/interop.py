"""Interoperability: HF ``tokenizer.json``, GPT-2 ``vocab.json``/``merges.txt``, tiktoken.

Export a plain BPE :class:`~gpubpe.model.Vocabulary` with :func:`to_hf_json` /
:func:`save_hf` (HF ``tokenizers`` and ``transformers.PreTrainedTokenizerFast``
load the file and give gpubpe's ids) or :func:`to_tiktoken`; import with
:func:`from_hf`, :func:`from_gguf`, :func:`from_gpt2_files` or :func:`from_tiktoken`.
Scaffold vocabularies cannot be exported: neither format can demolish tokens.
SentencePiece-style BPE files (HF ``byte_fallback``, GGUF "llama") are read and written
by ``gpubpe.sentencepiece``: a tokenizer.json only.

Ids. gpubpe numbers the byte tokens by byte value (0-255), merged tokens by
creation order from 256, and special tokens after them (``vocab_size + i``).
An export keeps these ids. An import renumbers to them, so ids change unless
the file already follows this numbering (files written here do). GPT-2's files
do not: GPT-2 numbers its 256 byte tokens in the order of its printable
characters (``!`` is 0, ``"`` is 1, ..., the space ``Ġ`` is 220), so after
import the byte ids are permuted while merged tokens keep ids 256-50255 and
``<|endoftext|>`` stays 50256. A HF ``BpeTrainer`` file numbers bytes by code
point and its special tokens first (0, 1, ...), which shifts every other id.
:func:`hf_id_map` gives the old -> new id map of an import.

HF semantics this module relies on (checked by ``tests/test_interop.py``):

- HF's ``ByteLevel`` pre-tokenizer splits with exactly gpubpe's ``gpt2``
  pattern; other patterns are exported as a ``Split`` (``Isolated`` for the
  named patterns, which match all text; ``Removed`` + ``invert`` for custom
  ones, which keeps only matches, as gpubpe does) followed by
  ``ByteLevel(use_regex=False)``. HF's regex engine (Oniguruma) reads
  ``{1,3}+`` as a repeated group, not a possessive one, so cl100k is written
  with ``{1,3}`` (same matches) and custom patterns using it are refused. The
  export splits a probe text with HF and raises ConfigError on any difference.
  The engines still differ on code points that Oniguruma's Unicode tables,
  older than those of Python's ``regex``, do not class as letters or digits
  (about 17,000, nearly all in recently encoded scripts and CJK extensions):
  text holding them may get other ids from HF.
- A rule whose result is an existing token is kept: HF looks the result up by
  its string, as gpubpe does. A pair listed twice gets the *last* rank in HF
  (its merge table is a map filled in order) but the *first* in gpubpe; the
  export drops the later copies (they never fire in gpubpe and create no
  token) and the import drops the earlier ones.

tiktoken (``encode_ordinary``) differs from BPE by rules in two ways: it
returns a whole pre-tokenized piece that is itself a token without merging,
and it merges *any* adjacent pair whose concatenation is a token, lowest
*token* rank first, not the listed rules by *rule* rank. On vocabularies
gpubpe trains, the two agree (tested on the multiscript corpus). They differ
on vocabularies with (a) a rule whose result is an existing token: tiktoken
ranks it by the token's older rank, or (b) a token its own bytes do not
encode to (the rules build ``bc`` before ``ab`` and ``abc`` only from
``ab + c``): tiktoken still reaches it, from ``a + bc`` or by the whole-piece
lookup. Such vocabularies come from hand-written or imported rules; the tests
construct both cases. :func:`from_tiktoken` recovers each token's merge by
running tiktoken's BPE on its bytes with the lower ranks only, so it yields
the rules tiktoken itself follows.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import regex

from . import gguf, sentencepiece
from .bytes_order import BYTE_TO_CHAR, chars_to_bytes, hf_byte_level, strings_to_bytes
from .errors import ConfigError, ModelFormatError
from .kernels.encode.rules import all_splits
from .model import IdLayout, Vocabulary, tokenizer_json_path, write_text_atomically
from .normalize import FORMS
from .post_processor import hf_template_processing, template_from_hf
from .pretokenize import (
    BYTES_STEP,
    CL100K_PATTERN,
    GPT2_PATTERN,
    NAMED_PATTERNS,
    hf_punctuation_class,
    isolated,
    resolve_pattern,
    split_words,
    word_bytes,
)

# tiktoken needs a pattern; a vocabulary without one encodes each text as one word.
WHOLE_TEXT_PATTERN = r"[\s\S]+"
# tiktoken's spelling of the GPT-2 pattern (r50k_base), equivalent to gpubpe's "gpt2".
TIKTOKEN_GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
# Oniguruma (HF) reads "{1,3}+" as "one or more runs of 1-3", not as possessive: HF gets
# cl100k without it. Dropping it changes nothing: no part of that alternative follows it.
HF_SPELLING = {CL100K_PATTERN: CL100K_PATTERN.replace(r"\p{N}{1,3}+", r"\p{N}{1,3}")}
_POSSESSIVE_COUNT = regex.compile(r"(?<!\\)\{\d*,?\d*\}\+")
# Text the exported pre-tokenizer is checked on: contractions, digits, runs of
# spaces and newlines, tabs, CJK, emoji, combining marks, no-break spaces.
PROBE_TEXT = (
    "Hello world! It's   a test:\n\n  x = f(10, 2.5)  # note\r\n\tTabs\t and  spaces   \n"
    "I'LL they've 1234567 ½ ① ...\n中文文本，日本語のテキスト。한국어 텍스트 😀👍🏽 "
    "e\u0301 naïve café\u00a0nbsp \u2028 end  "
)


def token_to_hf(piece: bytes) -> str:
    """A token's bytes as its GPT-2 byte-level string.

    >>> token_to_hf(b" the"), token_to_hf("é".encode())
    ('Ġthe', 'Ã©')
    """
    return "".join(BYTE_TO_CHAR[byte] for byte in piece)


def hf_to_token(text: str) -> bytes:
    """Inverse of :func:`token_to_hf`; ModelFormatError for a non-byte-level string."""
    try:
        return chars_to_bytes(text)
    except UnicodeEncodeError as exc:
        raise ModelFormatError(
            f"token {text!r} holds {text[exc.start]!r}, which is not a GPT-2 byte-level "
            "character: the file is not a byte-level BPE vocabulary"
        ) from None


# ================================================================ export: HF


def to_hf_json(vocab: Vocabulary) -> dict:
    """The HF ``tokenizer.json`` object of a plain BPE vocabulary or a SentencePiece-style
    one (ids unchanged).

    When ``tokenizers`` is installed, the pre-tokenizer is checked to split a
    probe text as gpubpe does; a custom pattern HF's regex engine reads
    differently raises ConfigError.
    """
    if isinstance(vocab, Vocabulary) and vocab.layout is not None and vocab.layout.metaspace:
        return {"version": "1.0", "truncation": None, "padding": None,
                "added_tokens": _hf_added_tokens(vocab), "post_processor": _hf_template(vocab),
                **sentencepiece.hf_sections(vocab, vocab.layout)}
    _check_plain_bpe(vocab, "a HF tokenizer.json")
    pre_tokenizer = _hf_pre_tokenizer(vocab.pattern)
    _check_hf_split(pre_tokenizer, vocab.pattern)
    layout = vocab.layout
    if layout is not None and layout.prefix_space:
        pre_tokenizer = {**pre_tokenizer, "add_prefix_space": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _hf_added_tokens(vocab),
        "normalizer": {"type": layout.normalizer} if layout is not None and layout.normalizer
        else None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _hf_post_processor(vocab),
        "decoder": hf_byte_level(use_regex=True),
        "model": _hf_bpe_model(vocab),
    }


def save_hf(vocab: Vocabulary, path) -> None:
    """Write :func:`to_hf_json` to ``path`` (a ``tokenizer.json``), atomically."""
    text = json.dumps(to_hf_json(vocab), ensure_ascii=False, indent=1)
    write_text_atomically(Path(path), text)


def _check_plain_bpe(vocab: Vocabulary, target: str) -> None:
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"expected a gpubpe Vocabulary, got {type(vocab).__name__}; "
                        "pass tokenizer.vocabulary")
    if vocab.layout is not None and vocab.layout.byte_fallback_ids is not None:
        raise ConfigError(f"this is a SentencePiece-style vocabulary (<0xXX> byte fallback, "
                          f"'▁' for spaces), which {target} cannot express; export it as a HF "
                          "tokenizer.json")
    if vocab.demolish_ids is not None or vocab.output_bytes is not None:
        raise ConfigError(
            f"this is a Scaffold-BPE vocabulary: its output ids come from demolishing "
            f"scaffold tokens, which {target} cannot express; export a plain BPE vocabulary"
        )


def _hf_pre_tokenizer(pattern) -> dict:
    text = resolve_pattern(pattern)
    if text is None:
        return hf_byte_level(use_regex=False)
    if text == GPT2_PATTERN:
        return hf_byte_level(use_regex=True)
    steps = text if isinstance(text, tuple) else (text,)
    on_text = [step for step in steps if not step.startswith(BYTES_STEP)]
    on_bytes = [step.removeprefix(BYTES_STEP) for step in steps[len(on_text):]]
    return {"type": "Sequence", "pretokenizers": [*map(_hf_split, on_text),
                                                  hf_byte_level(use_regex=False),
                                                  *map(_hf_split, on_bytes)]}


def _hf_split(text: str) -> dict:
    """HF's Split step of one regex: Isolated for a named pattern, else its matches kept."""
    named = text in NAMED_PATTERNS.values()
    if not named and _POSSESSIVE_COUNT.search(text):
        raise ConfigError(
            f"pattern {text!r} has a possessive counted repeat ('{{n,m}}+'), which HF's regex "
            "engine reads as a repeated group; write it without the '+' (or as an atomic group)"
        )
    return {"type": "Split", "pattern": {"Regex": HF_SPELLING.get(text, text)},
            "behavior": "Isolated" if named else "Removed", "invert": not named}


def _hf_added_tokens(vocab: Vocabulary) -> list[dict]:
    flags = vocab.layout.special_flags if vocab.layout is not None else {}
    return [
        {"id": token_id, "content": content, "single_word": "single_word" in flags.get(content, ()),
         "lstrip": "lstrip" in flags.get(content, ()),
         "rstrip": "rstrip" in flags.get(content, ()),
         "normalized": "normalized" in flags.get(content, ()),
         "special": "not_special" not in flags.get(content, ())}
        for content, token_id in sorted(vocab.special_ids().items(), key=lambda item: item[1])
    ]


def _hf_bpe_model(vocab: Vocabulary) -> dict:
    pieces = vocab.token_bytes
    merges = [f"{token_to_hf(pieces[left])} {token_to_hf(pieces[right])}"
              for left, right in _first_rules(vocab.rules)]
    output_ids = range(len(pieces)) if vocab.layout is None else vocab.layout.output_ids.tolist()
    return {
        "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
        "ignore_merges": vocab.layout is not None and vocab.layout.whole_tokens,
        "vocab": _hf_vocab(vocab, pieces, output_ids),
        # "a b" strings: byte-level strings hold no space, and every tokenizers version reads them.
        "merges": merges,
    }


def _hf_vocab(vocab: Vocabulary, pieces, output_ids) -> dict[str, int]:
    """Model vocab: every token with an output id, then the special tokens (as HF's trainer
    writes them: HF gives an added token missing from the model vocab an id of its own)."""
    table = {token_to_hf(piece): token_id for piece, token_id in zip(pieces, output_ids)
             if token_id >= 0}
    for content, token_id in vocab.special_ids().items():
        table.setdefault(content, token_id)
    return table


def _first_rules(rules: np.ndarray) -> list[tuple[int, int]]:
    """Rule pairs in rank order, later copies of a pair dropped (gpubpe never fires them)."""
    seen: set[tuple[int, int]] = set()
    pairs = []
    for left, right, _ in rules.tolist():
        if (left, right) not in seen:
            seen.add((left, right))
            pairs.append((left, right))
    return pairs


def _check_hf_split(pre_tokenizer: dict, pattern: str | None) -> None:
    """Raise ConfigError when HF splits the probe text otherwise than gpubpe (if installed)."""
    try:
        mismatch = _hf_split_mismatch(pre_tokenizer, pattern)
    except Exception as exc:  # tokenizers raises a bare Exception for a regex it cannot compile
        raise ConfigError(f"HF tokenizers cannot use the pattern {pattern!r}: {exc}") from None
    if mismatch:
        raise ConfigError(
            f"HF's regex engine splits text with the pattern {pattern!r} differently from "
            f"gpubpe ({mismatch}); the exported tokenizer would give other ids. Use a pattern "
            "both engines read alike (the named ones do)"
        )


def _hf_split_mismatch(pre_tokenizer: dict, pattern: str | None) -> str | None:
    """The first word where HF and gpubpe split ``PROBE_TEXT`` apart, or None.

    None too when ``tokenizers`` is not installed: there is nothing to compare with.
    """
    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError:
        return None
    shell = {"version": "1.0", "pre_tokenizer": pre_tokenizer,
             "model": {"type": "BPE", "vocab": {}, "merges": []}}
    try:
        hf = HfTokenizer.from_str(json.dumps(shell))
        theirs = [piece for piece, _ in hf.pre_tokenizer.pre_tokenize_str(PROBE_TEXT)]
    except Exception:  # HF cannot load this pre-tokenizer on its own: nothing to compare
        return None  # (only HF's side: an error of gpubpe's split once hid here)
    ours = [token_to_hf(word_bytes(word))  # a word may end inside a character
            for word in split_words(PROBE_TEXT, resolve_pattern(pattern))]
    if theirs == ours:
        return None
    first = _first_difference(theirs, ours)
    return f"word {first}: HF {theirs[first:first + 1]}, gpubpe {ours[first:first + 1]}"


def _hf_template(vocab: Vocabulary) -> dict | None:
    return None if vocab.template is None else \
        hf_template_processing(vocab.template, vocab.special_ids())


def _hf_post_processor(vocab: Vocabulary) -> dict:
    """A byte-level file's: ByteLevel (offsets), then the template (Llama 3's form)."""
    byte_level = hf_byte_level(use_regex=False, trim_offsets=False)
    template = _hf_template(vocab)
    return byte_level if template is None else {"type": "Sequence",
                                                "processors": [byte_level, template]}


# ================================================================ import: HF


def from_hf(source, *, strict: bool = True, where: str = "tokenizer.json") -> Vocabulary:
    """Import a HF byte-level BPE ``tokenizer.json`` (a path, its JSON text, or the parsed dict).

    Ids are HF's: ``Tokenizer(vocab).encode(text, allowed_special="all")`` equals
    HF's ``encode(text, add_special_tokens=False).ids``, and with
    ``add_special_tokens=True`` HF's ``encode(text).ids``: the post-processor's special
    tokens around it (``gpubpe.post_processor``). Supported: a BPE model
    (``ignore_merges`` too), a ByteLevel pre-tokenizer (``add_prefix_space``
    either way), alone or after ``Split``, ``Digits`` and ``Punctuation`` steps (run in
    sequence), then ``Split`` and ``Digits`` steps on the bytes' characters (Falcon's), no
    normalizer or one Unicode form (NFC, NFD, NFKC, NFKD, as HF's tables have them:
    ``gpubpe.normalize``), added tokens (all become special tokens, matched before
    the split with their lstrip / rstrip / single_word flags; those HF does not call
    special are matched always, as HF does). A custom
    ``Split`` regex with ``Isolated`` behavior gets an alternative matching the
    text between its matches, which HF keeps as words too. SentencePiece-style BPE
    (``byte_fallback``: Llama 2, Mistral 7B, Phi-3, Gemma) is read too
    (``gpubpe.sentencepiece``): "▁" for spaces by a Replace normalizer or a Metaspace
    pre-tokenizer, Llama 2's Prepend("▁") or Metaspace's prepend_scheme, <0xXX> tokens
    for characters the vocabulary lacks; decoding drops the prefix space as its decoder does.
    With ``strict`` (default), settings that would make gpubpe's ids differ from
    HF's on some text raise ModelFormatError (another normalizer, BPE dropout,
    ``add_prefix_space`` after a Split); with ``strict=False`` they are ignored
    and listed in ``metadata["hf_import_notes"]``. WordPiece, Unigram and
    other BPE models (a continuing-subword prefix, an end-of-word suffix) are refused.
    """
    return _import_hf(_read_hf_json(source), strict, where)[0]


def hf_id_map(source, *, strict: bool = True) -> dict[int, int]:
    """HF id -> gpubpe id of each token :func:`from_hf` keeps: the same id (imports keep HF's)."""
    return _import_hf(_read_hf_json(source), strict)[1]


def from_gguf(path, *, pattern=None, strict: bool = True) -> Vocabulary:
    """Import the tokenizer of a GGUF file (llama.cpp's format; a vocab-only file or a whole
    model, of which only the metadata is read): ids as the model's HF tokenizer gives them.

    A byte-level BPE (``tokenizer.ggml.model`` "gpt2") is read as the HF tokenizer.json it
    came from (``gpubpe.gguf``); its split comes from ``tokenizer.ggml.pre``, a name in
    llama.cpp's table. ``pattern`` (a name of ``NAMED_PATTERNS``, a regex or a list of
    them) gives the split of a name gpubpe's table lacks. A SentencePiece BPE ("llama":
    Llama 1-2, Mistral 7B, Phi-3, Gemma 1-3; "gemma4") is read as transformers' converter
    writes its tokenizer.json. Other tokenizer models (WordPiece, Unigram...) raise
    ModelFormatError saying which they are."""
    where = str(path)
    if pattern is not None:
        try:
            resolve_pattern(pattern)
        except ConfigError as exc:
            raise ConfigError(f"pattern={pattern!r}: {exc}") from None
    vocab = _import_hf(gguf.hf_tokenizer_json(gguf.read_metadata(path), where, pattern),
                       strict, where, pattern)[0]
    return dataclasses.replace(vocab, metadata={**vocab.metadata, "imported_from": "gguf"})


def from_sentencepiece(path) -> Vocabulary:
    """Import a SentencePiece BPE ``tokenizer.model`` (Llama 1-2, Mistral 7B, Gemma, Phi-3):
    SentencePiece's ids, read as transformers' converter writes the model's tokenizer.json
    (``gpubpe.sentencepiece.read_model_file``). Control pieces (``<s>``) are special
    tokens, never matched in text by SentencePiece (``disallowed_special=()`` gives its
    ids); user-defined pieces are matched always, as SentencePiece matches them, with its
    one "▁" before the whole text (the prefix rule "sentencepiece"; transformers' converter
    puts one before each stretch between added tokens). A model of another kind (Unigram)
    or with other text rules raises ModelFormatError naming it. The template
    (``add_special_tokens=True``) is the model's BOS, as ``LlamaTokenizerFast`` adds it."""
    path = Path(path)
    model = sentencepiece.read_model_file(path)
    data = sentencepiece.hf_tokenizer_json(model.pieces, model.prefix_space, model.unknown_id,
                                           bos_id=model.bos_id)
    vocab = _import_hf(data, True, str(path))[0]
    layout = vocab.layout if not model.prefix_space else \
        dataclasses.replace(vocab.layout, prefix_rule="sentencepiece")
    return dataclasses.replace(vocab, layout=layout, metadata={
        **vocab.metadata, "imported_from": f"sentencepiece {path.name}"})


def from_gpt2_files(vocab_json, merges_txt) -> Vocabulary:
    """Import GPT-2 style ``vocab.json`` + ``merges.txt`` (GPT-2 pattern, no prefix space).

    Vocabulary entries no merge makes and that are not single bytes (GPT-2's
    ``<|endoftext|>``) become special tokens, in the order of their ids.
    """
    vocab_path, merges_path = Path(vocab_json), Path(merges_txt)
    hf_vocab = _read_json_file(vocab_path)
    if not isinstance(hf_vocab, dict):
        raise ModelFormatError(f"{vocab_path}: expected a JSON object of token -> id")
    merges = _read_merges_txt(merges_path)
    made = {a + b for a, b in (_merge_pair(m, i, str(merges_path)) for i, m in enumerate(merges))}
    single = {BYTE_TO_CHAR[b] for b in range(256)}
    extra = sorted((t for t in hf_vocab if t not in made and t not in single), key=hf_vocab.get)
    data = {
        "added_tokens": [{"id": hf_vocab[t], "content": t, "special": True} for t in extra],
        "normalizer": None,
        "pre_tokenizer": hf_byte_level(use_regex=True),
        "model": {"type": "BPE", "vocab": hf_vocab, "merges": merges},
    }
    return _import_hf(data, strict=True, where=str(vocab_path))[0]


def _read_json_file(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file") from None
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{path} is not valid JSON ({exc})") from None


def _read_merges_txt(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    return [line for line in lines if line and not line.startswith("#version")]


def _read_hf_json(source) -> dict:
    if isinstance(source, dict):
        return source
    if isinstance(source, str) and source.lstrip().startswith("{"):
        try:
            data = json.loads(source)
        except ValueError as exc:
            raise ModelFormatError(f"the tokenizer JSON text is not valid JSON ({exc})") from None
    elif isinstance(source, str | os.PathLike):  # a file, or a model folder holding one
        path = Path(source)
        data = _read_json_file(tokenizer_json_path(path))
    else:
        raise TypeError(f"expected a path, JSON text or dict, got {type(source).__name__}")
    if not isinstance(data, dict):
        raise ModelFormatError(
            f"expected a tokenizer.json object, got a JSON {type(data).__name__}")
    return data


def _import_hf(data: dict, strict: bool, where: str = "tokenizer.json", pattern=None):
    """(Vocabulary with HF's ids, HF id -> gpubpe id) of a parsed HF tokenizer.json; with
    ``pattern`` (checked already), that split instead of its pre-tokenizer's."""
    notes: list[str] = []
    model = _hf_model_section(data, where)
    _check_model_options(model, where, strict, notes)
    layout = IdLayout(np.zeros(0, np.int64), [], whole_tokens=bool(model.get("ignore_merges")))
    sentencepiece_style = bool(model.get("byte_fallback"))
    if sentencepiece_style:
        pattern = _sentencepiece_text(data, layout, where, strict, notes)
    else:
        layout.normalizer = _normalizer_from_hf(data.get("normalizer"), where, strict, notes)
        if pattern is None:
            pattern, layout.prefix_space = _pattern_from_hf(data.get("pre_tokenizer"), where,
                                                            strict, notes)
            _check_imported_split(data["pre_tokenizer"], pattern, where, strict, notes)
        else:
            pattern = _named(pattern)
    specials = _special_from_hf(data.get("added_tokens") or [], where,
                                layout.normalizer is not None)
    layout.special_ids = [token_id for _, token_id, _ in specials]
    layout.special_flags = {content: flags for content, _, flags in specials if flags}
    hf_vocab = model.get("vocab")
    if not isinstance(hf_vocab, dict):
        raise ModelFormatError(f"{where}: model.vocab is missing or not an object")
    special_ids = set(layout.special_ids)
    if sentencepiece_style:
        token_bytes, layout.output_ids, internal, rules, layout.byte_fallback_ids = \
            sentencepiece.tokens(list(hf_vocab), _vocab_ids(hf_vocab, where), special_ids, where)
    else:
        token_bytes, layout.output_ids, internal = _tokens_from_hf_vocab(hf_vocab, special_ids,
                                                                         where, notes)
        rules = np.zeros((0, 3), np.int64)
    lefts, rights = _merge_pairs(model.get("merges", []), where)
    rules = _last_rules(np.concatenate([rules, _rules_of_merges(lefts, rights, internal, where)]))
    template = template_from_hf(
        data.get("post_processor"), {content: token_id for content, token_id, _ in specials},
        where, lambda message: _strict_issue(message, where, strict, notes))
    metadata = {"imported_from": "hf tokenizer.json"}
    if notes:
        metadata["hf_import_notes"] = notes
    vocab = _vocabulary_of(token_bytes, rules, layout, [c for c, _, _ in specials], pattern,
                           metadata, where)
    vocab.template = template
    return vocab, {i: i for i in vocab.special_ids().values()} | {
        i: i for i in vocab.normal_output_ids().tolist()}


def _sentencepiece_text(data: dict, layout: IdLayout, where: str, strict: bool,
                        notes: list[str]):
    """The split pattern of a SentencePiece-style file, its prefix space set on ``layout``
    (``gpubpe.sentencepiece.text_rules``)."""
    layout.prefix_space, layout.prefix_rule, pattern = sentencepiece.text_rules(
        data, where, lambda message: _strict_issue(message, where, strict, notes))
    return pattern


def _vocabulary_of(token_bytes, rules, layout, specials, pattern, metadata, where):
    try:
        return Vocabulary.from_tokens(token_bytes, rules, layout, specials, pattern, metadata)
    except ValueError as exc:
        raise ModelFormatError(f"{where}: {exc}") from None


def _tokens_from_hf_vocab(hf_vocab: dict, special_ids: set[int], where: str, notes: list[str]):
    """(token bytes by internal id, output id by internal id, {token string: internal id})
    of a HF BPE vocab.

    Bytes are internal ids 0-255 (output -1 when the vocab lacks one: HF drops
    such a byte), other tokens follow in HF id order. Entries that are added
    tokens, or not byte-level strings, are no BPE token: HF never emits them.
    The strings become bytes in one pass (``strings_to_bytes``) and the rest is array
    work: one by one, Command-R's 256 K tokens took 0.63 s; now 0.2.
    """
    texts = list(hf_vocab)
    ids = _vocab_ids(hf_vocab, where)
    pieces = strings_to_bytes(texts)
    lengths = np.fromiter((len(piece) if piece else 0 for piece in pieces), dtype=np.int64,
                          count=len(pieces))
    if special_ids:
        lengths[np.isin(ids, np.fromiter(special_ids, dtype=np.int64))] = 0
    output_ids = np.full(256, -1, dtype=np.int64)
    single = np.flatnonzero(lengths == 1)
    output_ids[[pieces[i][0] for i in single]] = ids[single]
    longer = np.flatnonzero(lengths > 1)
    longer = longer[np.argsort(ids[longer], kind="stable")]
    missing = np.flatnonzero(output_ids < 0)
    if missing.size:
        notes.append(f"{missing.size} byte(s) have no token (e.g. {bytes([missing[0]])!r}): "
                     "they encode to nothing, as in HF")
    token_bytes = [bytes([b]) for b in range(256)] + [pieces[i] for i in longer.tolist()]
    output = np.concatenate([output_ids, ids[longer]])
    internal = {BYTE_TO_CHAR[b]: b for b in range(256)}
    internal.update(zip([texts[i] for i in longer.tolist()], range(256, 256 + longer.size)))
    return token_bytes, output, internal


def _vocab_ids(hf_vocab: dict, where: str) -> np.ndarray:
    """The vocab's ids (int64), each checked to be an int >= 0."""
    try:
        ids = np.fromiter(hf_vocab.values(), dtype=np.int64, count=len(hf_vocab))
        bad = not all(type(i) is int for i in hf_vocab.values()) or (ids < 0).any()
    except (TypeError, ValueError, OverflowError):
        bad = True
    if bad:
        text, hf_id = next((t, i) for t, i in hf_vocab.items()
                           if type(i) is not int or not 0 <= i < 2**63)
        raise ModelFormatError(f"{where}: vocab entry {text!r} has id {hf_id!r}")
    return ids


def _rules_of_merges(lefts: list[str], rights: list[str], internal: dict[str, int],
                     where: str) -> np.ndarray:
    """Rules (n x 3, internal ids) of merges of token strings in rank order.

    A merge's result is the concatenation of its two strings (GPT-2's characters stand for
    one byte each), so the strings are looked up as they are, never turned into bytes
    (turned into bytes, DeepSeek's file loaded in 0.50-0.66 s; now 0.34-0.40 s, HF's own
    ``from_file`` 0.18-0.23 s). Looked up into lists, then one array: a row assigned per
    merge took 0.26 s of Command-R's 253 K."""
    try:
        return np.array([[internal[left] for left in lefts], [internal[right] for right in rights],
                         [internal[left + right] for left, right in zip(lefts, rights)]],
                        dtype=np.int64).reshape(3, -1).T.copy()
    except KeyError:  # name the first merge that needs a string the vocab lacks
        rank, left, right, missing = next(
            (rank, left, right, text) for rank, (left, right) in enumerate(zip(lefts, rights))
            for text in (left, right, left + right) if text not in internal)
        raise ModelFormatError(f"{where}: merge {rank} ({left!r}, {right!r}) needs "
                               f"{missing!r}, which is not in model.vocab") from None


def _last_rules(rules: np.ndarray) -> np.ndarray:
    """Drop all but the last copy of a repeated pair: HF gives a pair its last rank."""
    keys = rules[:, 0] * (int(rules[:, :2].max(initial=0)) + 1) + rules[:, 1]
    _, last_from_end = np.unique(keys[::-1], return_index=True)
    if last_from_end.size == keys.size:
        return rules
    return rules[np.sort(keys.size - 1 - last_from_end)]


def _hf_model_section(data: dict, where: str) -> dict:
    model = data.get("model")
    if not isinstance(model, dict):
        raise ModelFormatError(f"{where}: no 'model' section; is this a HF tokenizer.json?")
    kind = model.get("type", "BPE" if "merges" in model else None)
    if kind != "BPE":
        raise ModelFormatError(
            f"{where}: model type is {kind!r}; gpubpe imports byte-level BPE models only "
            "(WordPiece, Unigram and WordLevel vocabularies have no merge rules to import)"
        )
    return model


def _check_model_options(model: dict, where: str, strict: bool, notes: list[str]) -> None:
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ModelFormatError(f"{where}: model.{key} is {model[key]!r}; a byte-level BPE "
                                   "has none, so this file is not one gpubpe can import")
    if model.get("byte_fallback") and model.get("ignore_merges"):
        raise ModelFormatError(f"{where}: model.byte_fallback with ignore_merges is not a "
                               "combination gpubpe reads")
    if model.get("dropout"):
        _strict_issue(f"model.dropout is {model['dropout']}; gpubpe encodes without dropout",
                      where, strict, notes)


def _normalizer_from_hf(normalizer, where: str, strict: bool, notes: list[str]) -> str | None:
    """None or a Unicode normal form (``normalize.FORMS``); any other normalizer changes text
    in ways gpubpe does not follow."""
    if normalizer is None:
        return None
    steps = normalizer.get("normalizers") if isinstance(normalizer, dict) and \
        normalizer.get("type") == "Sequence" else [normalizer]
    kinds = [step.get("type") if isinstance(step, dict) else step for step in steps or []]
    if not kinds:
        return None
    if len(kinds) == 1 and kinds[0] in FORMS:
        return kinds[0]
    _strict_issue(f"a {kinds} normalizer is set; gpubpe supports no normalizer or one of "
                  f"{', '.join(FORMS)}, "
                  "so normalize text yourself before encoding", where, strict, notes)
    return None


def _strict_issue(message: str, where: str, strict: bool, notes: list[str]) -> None:
    if strict:
        raise ModelFormatError(f"{where}: {message}; pass strict=False to import anyway")
    notes.append(message)


def _pattern_from_hf(pre_tokenizer, where: str, strict: bool, notes: list[str]):
    """(gpubpe's pattern, add_prefix_space) of a ByteLevel pre-tokenizer, alone or after one or
    more Split or Digits steps (several: a tuple of patterns, run in sequence as HF runs them).
    """
    steps = _pre_tokenizer_steps(pre_tokenizer, where)
    kinds = [step.get("type") for step in steps]
    if "ByteLevel" not in kinds:
        raise ModelFormatError(
            f"{where}: pre-tokenizer is {kinds}; a byte-level BPE has a ByteLevel step "
            "(use a ByteLevel or Split + ByteLevel tokenizer.json)"
        )
    at = kinds.index("ByteLevel")
    splits, byte_level, after = steps[:at], steps[at], steps[at + 1:]
    prefix_space = bool(byte_level.get("add_prefix_space"))
    if prefix_space and (splits or after):
        _strict_issue("ByteLevel.add_prefix_space is true beside a Split: HF adds a space before "
                      "every word, gpubpe only before each text piece (ByteLevel alone)",
                      where, strict, notes)
    if any(split.get("type") not in ("Split", "Digits", "Punctuation") for split in splits) or \
            any(step.get("type") not in ("Split", "Digits") for step in after):
        raise ModelFormatError(
            f"{where}: pre-tokenizer is {kinds}; gpubpe reads Split, Digits and Punctuation "
            "steps, one ByteLevel (GPT-2's regex when its use_regex is true), and Split or "
            "Digits steps after it (run on the bytes' characters)"
        )
    patterns = [_pattern_of_step(split, where) for split in splits]
    patterns += ["gpt2"] if byte_level.get("use_regex", True) else []
    patterns += [BYTES_STEP + _pattern_of_step(step, where) for step in after]
    if after and not patterns[:-len(after)]:
        raise ModelFormatError(f"{where}: pre-tokenizer is {kinds}; steps after a ByteLevel "
                               "that does not split need a step before it")
    pattern = None if not patterns else patterns[0] if len(patterns) == 1 else tuple(patterns)
    return _named(pattern), prefix_space


def _pattern_of_step(step: dict, where: str) -> str:
    """A Split's pattern, or a Digits step's: HF splits at ``char::is_numeric`` (``\\p{N}``),
    each digit apart (``individual_digits``) or runs of them, keeping the text between; or
    a Punctuation step's (``is_ascii_punctuation || is_punctuation``: HF's own table,
    ``hf_punctuation_class``), runs of it (Contiguous) or each char (Isolated)."""
    if step.get("type") == "Digits":
        return isolated(r"\p{N}" if step.get("individual_digits") else r"\p{N}+")
    if step.get("type") == "Punctuation":
        behavior = step.get("behavior", "Isolated")
        if behavior not in _PUNCTUATION_RUNS:
            raise ModelFormatError(f"{where}: Punctuation behavior {behavior!r} is not "
                                   f"supported; gpubpe reads {sorted(_PUNCTUATION_RUNS)}")
        return isolated(hf_punctuation_class() + _PUNCTUATION_RUNS[behavior])
    return _pattern_of_split(step, where)


_PUNCTUATION_RUNS = {"Contiguous": "+", "Isolated": ""}


def _check_imported_split(pre_tokenizer: dict, pattern, where: str, strict: bool,
                          notes: list[str]) -> None:
    if pre_tokenizer.get("type") == "ByteLevel":  # the split alone, without the prefix space
        pre_tokenizer = {**pre_tokenizer, "add_prefix_space": False}
    mismatch = _hf_split_mismatch(pre_tokenizer, pattern)
    if mismatch:
        _strict_issue(f"Python's regex splits text with the pattern {pattern!r} otherwise than "
                      f"HF ({mismatch})", where, strict, notes)


def _pre_tokenizer_steps(pre_tokenizer, where: str) -> list[dict]:
    if not isinstance(pre_tokenizer, dict):
        raise ModelFormatError(
            f"{where}: pre-tokenizer is {pre_tokenizer!r}; a byte-level BPE needs a ByteLevel "
            "pre-tokenizer (this file is not byte-level)"
        )
    if pre_tokenizer.get("type") == "Sequence":
        steps = pre_tokenizer.get("pretokenizers") or []
        if steps and all(isinstance(step, dict) for step in steps):
            return steps
        raise ModelFormatError(f"{where}: the pre-tokenizer Sequence is empty or malformed")
    return [pre_tokenizer]


def _pattern_of_split(split: dict, where: str) -> str:
    """The findall pattern splitting as this HF Split does (gpubpe keeps matches only)."""
    spec = split.get("pattern") or {}
    behavior, invert = split.get("behavior"), bool(split.get("invert"))
    if "Regex" in spec:
        text = spec["Regex"]
    elif "String" in spec:
        text = regex.escape(spec["String"])
    else:
        raise ModelFormatError(f"{where}: Split pattern {spec!r} has neither 'Regex' nor 'String'")
    if (behavior, invert) == ("Removed", True):
        return text
    if (behavior, invert) != ("Isolated", False):
        raise ModelFormatError(
            f"{where}: Split behavior {behavior!r} with invert={invert} is not supported; "
            "gpubpe reads Isolated (invert false) and Removed (invert true)"
        )
    for name, value in NAMED_PATTERNS.items():
        if text in (value, HF_SPELLING.get(value)):
            return name
    return isolated(text)  # the text between matches is kept as words too


def _special_from_hf(added_tokens, where: str, normalizing: bool):
    """[(content, HF id, flags)] of the added tokens, in HF id order; they become special
    tokens, matched before the split with their lstrip / rstrip / single_word flags,
    "not_special" for HF's ``special: false`` (matched always, as HF does), and, when a
    normalizer is set, "normalized" for HF's ``normalized: true`` (matched in the
    normalized text: NFKC's "﹤mask﹥" is a "<mask>" there)."""
    specials = []
    for token in sorted(added_tokens, key=lambda t: t.get("id") or 0):
        content, token_id = token.get("content"), token.get("id")
        if not isinstance(content, str) or not content:
            raise ModelFormatError(f"{where}: added token {token!r} has no content")
        if not isinstance(token_id, int) or token_id < 0:
            raise ModelFormatError(f"{where}: added token {content!r} has id {token_id!r}")
        flags = [flag for flag in ("lstrip", "rstrip", "single_word") if token.get(flag)]
        flags += ["not_special"] if token.get("special") is False else []
        flags += ["normalized"] if normalizing and token.get("normalized") else []
        specials.append((content, token_id, flags))
    return specials


def _merge_pairs(merges, where: str) -> tuple[list[str], list[str]]:
    """(left strings, right strings) of the merges in rank order. The usual files in one
    pass: "a b" strings (GPT-2's characters hold no space) joined and split once, or
    [a, b] lists; ``_merge_pair`` names what is wrong in any other (split one by one,
    Command-R's 253 K took 0.13 s)."""
    if not isinstance(merges, list):
        raise ModelFormatError(f"{where}: model.merges is not a list")
    if all(type(merge) is str for merge in merges):
        parts = " ".join(merges).split(" ")
        if len(parts) == 2 * len(merges) and all(parts):
            return parts[0::2], parts[1::2]
    else:
        try:
            lefts, rights = [left for left, _ in merges], [right for _, right in merges]
            if all(type(part) is str and part for part in lefts + rights):
                return lefts, rights
        except (TypeError, ValueError):
            pass
    pairs = [_merge_pair(merge, rank, where) for rank, merge in enumerate(merges)]
    return [left for left, _ in pairs], [right for _, right in pairs]


def _merge_pair(merge, rank: int, where: str) -> tuple[str, str]:
    """One merge, written "a b" (older files) or ["a", "b"] (tokenizers >= 0.20)."""
    parts = merge.split(" ") if isinstance(merge, str) else merge
    if not isinstance(parts, list | tuple) or len(parts) != 2 or not all(
            isinstance(part, str) and part for part in parts):
        raise ModelFormatError(f"{where}: merge {rank} is {merge!r}; expected 'a b' or [a, b]")
    return parts[0], parts[1]


# ================================================================ tiktoken


def to_tiktoken(vocab: Vocabulary, name: str = "gpubpe"):
    """A ``tiktoken.Encoding`` whose ranks are gpubpe's ids (see the module docstring for
    the vocabularies on which tiktoken's ids differ from gpubpe's)."""
    _check_plain_bpe(vocab, "tiktoken")
    tiktoken = _import_tiktoken()
    output_ids = range(len(vocab.token_bytes)) if vocab.layout is None else \
        vocab.layout.output_ids.tolist()
    ranks = {piece: token_id for piece, token_id in zip(vocab.token_bytes, output_ids)
             if token_id >= 0}
    specials = vocab.special_ids()
    contiguous = vocab.n_ids == len(ranks) + len(specials)
    return tiktoken.Encoding(
        name,
        pat_str=tiktoken_pattern(vocab),
        mergeable_ranks=ranks,
        special_tokens=specials,
        explicit_n_vocab=vocab.n_ids if contiguous else None,
    )


def tiktoken_pattern(vocab: Vocabulary) -> str:
    """The ``pat_str`` tiktoken needs for ``vocab``: it splits with one regex, and changes
    no text before (an export of Claude's NFKC file, or Qwen 2's NFC one, gave other ids
    than gpubpe's on text the normalizer changes: "ＡＢＣ" 9 ids, not 1)."""
    change = None if vocab.layout is None else vocab.layout.text_change()
    if change is not None:
        raise ConfigError(f"this vocabulary {change} before splitting, which tiktoken cannot: "
                          "its ids would differ from gpubpe's on such text; export it as a "
                          "HF tokenizer.json instead")
    text = resolve_pattern(vocab.pattern)
    if isinstance(text, tuple):
        raise ConfigError(f"tiktoken splits text with one regex; this vocabulary runs {len(text)} "
                          "in sequence (a HF Sequence of Splits): export it to HF instead")
    return text or WHOLE_TEXT_PATTERN


def from_tiktoken(encoding, pattern: str | None = None,
                  special_tokens: dict[str, int] | None = None) -> Vocabulary:
    """Import a ``tiktoken.Encoding``, or a ``.tiktoken`` rank file with its ``pattern``.

    Ids are tiktoken's ranks, and encoding follows tiktoken's rule (DESIGN §2):
    a word that is a token maps to it whole; else any adjacent pair whose bytes
    are a token merges at that token's rank, lowest first, leftmost on ties.
    So every split ``(a, b)`` of a token into two tokens becomes a rule at the
    token's rank, and tokens reachable only whole (Llama 3 has some) work.
    ``pattern``: for a file, a name ('gpt2', 'cl100k', 'o200k', 'llama3', 'qwen2') or a
    regex; ``special_tokens``: ``{text: id}`` for a file (an Encoding has its own).
    """
    if isinstance(encoding, str | os.PathLike):
        if pattern is None:
            raise ConfigError("a .tiktoken rank file holds no split pattern: pass pattern= "
                              "('gpt2', 'cl100k', 'o200k', 'llama3', 'qwen2', 'tekken' or a "
                              "regex)")
        ranks, name = read_tiktoken_ranks(Path(encoding)), Path(encoding).name
        pat_str, specials = _tiktoken_pattern(pattern), dict(special_tokens or {})
    else:
        try:
            ranks, pat_str = encoding._mergeable_ranks, encoding._pat_str
            specials, name = dict(encoding._special_tokens), encoding.name
        except AttributeError:
            raise TypeError(f"expected a tiktoken.Encoding or a .tiktoken path, got "
                            f"{type(encoding).__name__}") from None
    return vocabulary_from_ranks(ranks, tiktoken_pattern_name(pat_str), specials,
                                 {"imported_from": f"tiktoken {name}"},
                                 f"tiktoken encoding {name!r}")


def _first_difference(a: list, b: list) -> int:
    """The first index where two lists differ (one's end counts as a difference)."""
    return next(i for i, pair in enumerate(zip(a + [None], b + [None])) if pair[0] != pair[1])


def check_probe_ids(encoding, ids: list[int]) -> None:
    """ModelFormatError unless ``ids`` are tiktoken's ids of ``PROBE_TEXT``."""
    expected = encoding.encode_ordinary(PROBE_TEXT)
    if ids != expected:
        at = _first_difference(ids, expected)
        raise ModelFormatError(
            f"tiktoken encoding {encoding.name!r}: Python's regex reads its pattern otherwise "
            f"than tiktoken (on a probe text, ids differ from position {at}: "
            f"{expected[at:at + 3]} expected, {ids[at:at + 3]} here), so imported ids would "
            f"differ; its pattern: {encoding._pat_str!r}")


def vocabulary_from_ranks(ranks: dict[bytes, int], pattern: str | None,
                          special_tokens: dict[str, int], metadata: dict,
                          where: str = "tiktoken ranks") -> Vocabulary:
    """A vocabulary following tiktoken's rule on ``{token bytes: rank}`` (ids are the ranks),
    with gpubpe's ``pattern`` and ``{text: id}`` special tokens."""
    token_bytes, output_ids = _tokens_by_rank(ranks, where)
    rules = all_splits(token_bytes)  # tokens in rank order after the bytes
    ordered = sorted(special_tokens, key=special_tokens.get)
    layout = IdLayout(output_ids, [special_tokens[s] for s in ordered], rank_by_token=True,
                      whole_tokens=True)
    return _vocabulary_of(token_bytes, rules, layout, ordered, pattern, metadata, where)


def save_tiktoken_ranks(vocab: Vocabulary, path) -> None:
    """Write a ``.tiktoken`` rank file (base64 token, space, rank; by rank), atomically:
    ``tiktoken.load.load_tiktoken_bpe`` reads it. The split pattern and special tokens are
    not part of the format: give them to ``tiktoken.Encoding`` (``vocab.pattern``,
    ``vocab.special_ids()``)."""
    _check_plain_bpe(vocab, "a .tiktoken rank file")
    output_ids = range(len(vocab.token_bytes)) if vocab.layout is None else \
        vocab.layout.output_ids.tolist()
    rows = sorted((rank, piece) for piece, rank in zip(vocab.token_bytes, output_ids)
                  if rank >= 0)
    text = "".join(f"{base64.b64encode(piece).decode('ascii')} {rank}\n" for rank, piece in rows)
    write_text_atomically(Path(path), text)


def read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """``{token bytes: rank}`` of a ``.tiktoken`` file (lines of base64 token and rank)."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    ranks = {}
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise ModelFormatError(f"{path}, line {number}: expected '<base64 token> <rank>', "
                                   f"got {line[:60]!r}") from None
    return ranks


def _tiktoken_pattern(pattern: str) -> str:
    return NAMED_PATTERNS.get(pattern, pattern)


def _tokens_by_rank(ranks: dict[bytes, int], where: str):
    """(token bytes by internal id, their ranks): bytes first, then the others by rank."""
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ModelFormatError(f"{where}: byte {missing[0]:#04x} is no token ({len(missing)} "
                               "bytes missing); a byte-level vocabulary has all 256")
    others = sorted((rank, piece) for piece, rank in ranks.items() if len(piece) > 1)
    token_bytes = [bytes([b]) for b in range(256)] + [piece for _, piece in others]
    output_ids = np.fromiter((ranks[piece] for piece in token_bytes), dtype=np.int64,
                             count=len(token_bytes))
    return token_bytes, output_ids


def tiktoken_pattern_name(pat_str: str) -> str | None:
    """A gpubpe pattern name for a tiktoken pattern when it is one of them, else the regex."""
    if pat_str == TIKTOKEN_GPT2_PATTERN:
        return "gpt2"
    if pat_str == WHOLE_TEXT_PATTERN:
        return None
    return _named(pat_str)


def _named(pattern):
    """The name of a named pattern's regex text (or sequence, names in it read as their
    regexes), else the pattern itself."""
    try:
        text = resolve_pattern(pattern)
    except ConfigError:  # not Python regex: the caller's checks name it
        return pattern
    return next((name for name, value in NAMED_PATTERNS.items() if value == text), pattern)


def _import_tiktoken():
    try:
        import tiktoken
    except ImportError:
        raise ConfigError("tiktoken is not installed; pip install tiktoken") from None
    return tiktoken
