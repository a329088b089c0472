"""SentencePiece-style BPE (HF's ``byte_fallback``: Llama 1-2, Mistral 7B, Phi-3, Gemma):
its tokens as gpubpe's bytes and rules, its text handling as an ``IdLayout``. Its sources:
a HF tokenizer.json, a GGUF file's pieces, or SentencePiece's own ``tokenizer.model``
(``read_model_file``), the last two as the tokenizer.json transformers' converter writes
(``hf_tokenizer_json``).

Such a vocabulary's symbols are characters, not bytes: a text's spaces become "▁", and a
character the vocabulary lacks becomes its UTF-8 bytes as <0xXX> tokens, which no merge
joins. gpubpe reads it as a byte-level BPE that gives the same ids:

- A space is byte 0x20 and stands for "▁" (the tokens' "▁" become spaces; a "▁" in text
  becomes a space before encoding, as HF's Replace makes both the same): a space costs
  no merge and no copy of the text.
- A character token of n > 1 bytes is reached by n - 1 rules ranked before every merge of
  the file, through prefixes of its bytes that are no token of the source (output id -1).
  Those rules run first, so each character the vocabulary has is whole before any merge;
  one it lacks stops at a prefix, which emits the <0xXX> ids of its bytes
  (``IdLayout.byte_fallback_ids``), as HF's fallback does.
- A byte is its one-character token (``a``, ``▁`` for the space) where the vocabulary has
  one, else its <0xXX> token.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import ModelFormatError
from .post_processor import hf_bos_eos

METASPACE = "▁"
# A piece's type in a SentencePiece model (``ModelProto.SentencePiece.Type``); GGUF's
# ``tokenizer.ggml.token_type`` numbers them the same.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# Metaspace's split=true (MergedWithNext at each "▁"), on text whose "▁" are spaces.
METASPACE_SPLIT = r" [^ ]*|[^ ]+"


def tokens(texts: list[str], ids: np.ndarray, special_ids: set[int], where: str):
    """(token bytes by internal id, output id by internal id, {token string: internal id},
    the character rules (n x 3), byte_fallback_ids) of a SentencePiece-style HF vocab."""
    fallback = np.full(256, -1, dtype=np.int64)
    pieces: list[tuple[int, str, bytes]] = []
    for text, hf_id in zip(texts, ids.tolist()):
        if hf_id in special_ids:
            continue
        match = _FALLBACK.fullmatch(text) if text[:3] == "<0x" else None
        if match:
            fallback[int(match.group(1), 16)] = hf_id
            continue
        if " " in text:
            raise ModelFormatError(f"{where}: token {text!r} holds a space; in a SentencePiece-"
                                   f"style vocabulary spaces are {METASPACE!r}")
        try:
            pieces.append((hf_id, text, text.replace(METASPACE, " ").encode("utf-8")))
        except UnicodeEncodeError:
            raise ModelFormatError(f"{where}: token {text!r} is not valid Unicode") from None
    pieces.sort()
    single = [(raw[0], hf_id, text) for hf_id, text, raw in pieces if len(raw) == 1]
    internal = {text: byte for byte, _, text in single}
    output = fallback.copy()  # a byte's own character where it has one, else <0xXX>
    output[[byte for byte, _, _ in single]] = [hf_id for _, hf_id, _ in single]
    fallback = np.where(fallback < 0, output, fallback)  # named by its character (Gemma: "\t")
    if (fallback < 0).any():
        missing = int(np.flatnonzero(fallback < 0)[0])
        raise ModelFormatError(f"{where}: model.byte_fallback is set but the vocab lacks "
                               f"<0x{missing:02X}>; gpubpe needs all 256 byte tokens")
    output = output.tolist()
    token_bytes = [bytes([b]) for b in range(256)]
    rules = _character_rules([piece for piece in pieces if len(piece[1]) == 1 and
                              len(piece[2]) > 1], token_bytes, output, internal)
    for hf_id, text, raw in pieces:
        if len(text) > 1:
            internal[text] = len(token_bytes)
            token_bytes.append(raw)
            output.append(hf_id)
    return token_bytes, np.array(output, dtype=np.int64), internal, rules, fallback


def _character_rules(characters, token_bytes: list[bytes], output: list[int],
                     internal: dict[str, int]) -> np.ndarray:
    """Rules building each multi-byte character token from its bytes, through prefixes that
    are no token of the source (appended to ``token_bytes`` with output id -1)."""
    rules = []
    prefix_ids: dict[bytes, int] = {}
    for hf_id, text, raw in characters:
        token = raw[0]
        for end in range(2, len(raw) + 1):
            prefix = raw[:end]
            if prefix not in prefix_ids:
                prefix_ids[prefix] = len(token_bytes)
                token_bytes.append(prefix)
                output.append(-1)
                rules.append((token, raw[end - 1], prefix_ids[prefix]))
            token = prefix_ids[prefix]
        output[token] = hf_id
        internal[text] = token
    return np.array(rules, dtype=np.int64).reshape(-1, 3)


def text_rules(data: dict, where: str, issue) -> tuple[bool, str, str | None]:
    """(prefix_space, prefix_rule, pattern) of a SentencePiece-style file's normalizer and
    pre-tokenizer: Prepend("▁") and Replace(" " -> "▁") (Llama 2's), a Metaspace step
    (prepend_scheme always / first / never, split or not), or both; Gemma's Split at " "
    after the Replace. ``issue(message)`` reports what gpubpe does not follow (``strict``)."""
    normalizers = _steps(data.get("normalizer"), "normalizers")
    pre_tokenizers = _steps(data.get("pre_tokenizer"), "pretokenizers")
    prefix_space, rule, pattern, replaced = False, "unless-space", None, False
    for step in normalizers:
        if step.get("type") == "Prepend" and step.get("prepend") == METASPACE:
            prefix_space, rule = True, "always"
        elif step.get("type") == "Replace" and step.get("pattern") == {"String": " "} \
                and step.get("content") == METASPACE:
            replaced = True
        else:
            issue(f"normalizer step {step} is not read (gpubpe reads Prepend('▁') and "
                  "Replace(' ', '▁') in a SentencePiece-style file)")
    for step in pre_tokenizers:
        if replaced and step.get("type") == "Split" and step.get("pattern") == {"String": " "}:
            continue  # Gemma's: a split at spaces after they became "▁" splits nothing
        if step.get("type") != "Metaspace" or step.get("replacement", METASPACE) != METASPACE:
            raise ModelFormatError(f"{where}: pre-tokenizer step {step} is not one gpubpe reads "
                                   "in a SentencePiece-style file (Metaspace with '▁', or none)")
        replaced = True
        scheme = step.get("prepend_scheme", "always" if step.get("add_prefix_space", True)
                          else "never")
        if scheme != "never":
            prefix_space, rule = True, {"always": "unless-space", "first": "first"}[scheme]
        pattern = METASPACE_SPLIT if step.get("split", True) else None
    if not replaced:
        raise ModelFormatError(f"{where}: a SentencePiece-style file (model.byte_fallback) "
                               "whose normalizer does not turn spaces into '▁' and that has "
                               "no Metaspace pre-tokenizer; gpubpe reads those that do")
    normalized = [token.get("content") for token in data.get("added_tokens") or []
                  if isinstance(token, dict) and token.get("normalized")]
    if normalizers and normalized:
        issue(f"added token {normalized[0]!r} has normalized: true, so HF matches it in the "
              "text after the normalizer, its own text normalized too ('▁' for its spaces, "
              "one before it); gpubpe matches added tokens in the text as written")
    if prefix_space and not _strips_space(data.get("decoder")):
        issue("the decoder keeps the prefix space the text gets; gpubpe's decode drops it")
    return prefix_space, rule, pattern


def _steps(section, key: str) -> list[dict]:
    if section is None:
        return []
    steps = section.get(key) if section.get("type") == "Sequence" else [section]
    return [step for step in steps or [] if isinstance(step, dict)]


def _strips_space(decoder) -> bool:
    return any(step.get("type") == "Strip" and step.get("start", 0) >= 1 or
               step.get("type") == "Metaspace" and step.get("prepend_scheme") != "never"
               for step in _steps(decoder, "decoders"))


def merges_by_score(texts: list[str], scores: list[float]) -> list[list[str]]:
    """The merges of a SentencePiece BPE given as scored pieces (a GGUF file holds no merges),
    as HF's converter makes them (transformers' ``SentencePieceExtractor``): every split of
    a piece into two pieces, by the piece's score, highest first (ties in vocab order)."""
    vocab = {text: i for i, text in enumerate(texts)}
    merges = []
    for text, score in zip(texts, scores):
        splits = [(vocab[text[:k]], vocab[text[k:]], text[:k], text[k:])
                  for k in range(1, len(text)) if text[:k] in vocab and text[k:] in vocab]
        merges.extend((-score, *split) for split in sorted(splits))
    order = sorted(range(len(merges)), key=lambda k: merges[k][0])  # stable: vocab order
    return [[merges[k][3], merges[k][4]] for k in order]


class Pieces(NamedTuple):
    """A SentencePiece vocabulary: each piece's text, score and type, by id."""

    texts: list[str]
    scores: list[float]
    kinds: list[int]


def hf_tokenizer_json(pieces: Pieces, prefix_space: bool, unknown_id: int,
                      merges: list | None = None, bos_id: int | None = None) -> dict:
    """The HF tokenizer.json transformers' converter writes for a SentencePiece BPE (Llama's):
    merges from the pieces' scores unless given, "▁" for spaces and one before the text
    (``prefix_space``), <0xXX> fallback; control, unknown and user-defined pieces are added
    tokens (HF matches the user-defined ones in text, as SentencePiece does). ``bos_id``: the
    control piece HF's post-processor puts before each text (``LlamaTokenizerFast``'s
    ``add_bos_token``), or None."""
    kept = [(text, i, kind) for i, (text, kind) in enumerate(zip(pieces.texts, pieces.kinds))
            if kind != UNUSED and text]
    added = [{"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": kind != USER_DEFINED}
             for text, i, kind in kept if kind in (UNKNOWN, CONTROL, USER_DEFINED)]
    unknown = pieces.texts[unknown_id] if 0 <= unknown_id < len(pieces.texts) else None
    model = {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": unknown,
             "vocab": {text: i for text, i, _ in kept},
             "merges": merges or merges_by_score([text for text, _, _ in kept],
                                                 [pieces.scores[i] for _, i, _ in kept])}
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}
    prepend = [{"type": "Prepend", "prepend": METASPACE}] if prefix_space else []
    strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix_space else []
    decoders = [{**replace, "pattern": {"String": METASPACE}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, *strip]
    bos_id = bos_id if bos_id is not None and 0 <= bos_id < len(pieces.texts) and \
        pieces.kinds[bos_id] == CONTROL else None
    return {"normalizer": {"type": "Sequence", "normalizers": [*prepend, replace]},
            "pre_tokenizer": None, "model": model, "added_tokens": added,
            "post_processor": hf_bos_eos(pieces.texts, bos_id, None),
            "decoder": {"type": "Sequence", "decoders": decoders}}


# ------------------------------------------------------------ SentencePiece's model file
# A ``tokenizer.model`` is a protobuf ``ModelProto`` (sentencepiece_model.proto): pieces
# (field 1: text 1, score 2, type 3), trainer_spec (2) and normalizer_spec (3). Read here
# without protobuf: the fields below, each with proto2's default where the file omits it.
_TRAINER_DEFAULTS = {"model_type": (3, 1), "treat_whitespace_as_suffix": (24, 0),
                     "byte_fallback": (35, 0), "unk_id": (40, 0), "bos_id": (41, 1)}
_NORMALIZER_DEFAULTS = {"name": (1, b""), "precompiled_charsmap": (2, b""),
                        "add_dummy_prefix": (3, 1), "remove_extra_whitespaces": (4, 1),
                        "escape_whitespaces": (5, 1), "normalization_rule_tsv": (6, b"")}
_BPE = 2
_MODEL_TYPES = {1: "Unigram (T5, ALBERT, XLNet, mT5 ...)", 3: "WORD", 4: "CHAR"}


def is_model_file(path: Path) -> bool:
    """Whether the file at ``path`` starts as a SentencePiece model does (a piece: field 1,
    whose text is field 1 too), and not as JSON."""
    try:
        with open(path, "rb") as file:
            start = file.read(64)
    except OSError:
        return False
    return start[:1] == b"\n" and start[2:3] == b"\n" and start.lstrip()[:1] not in b"{["


class ModelFile(NamedTuple):
    """What gpubpe reads of a ``tokenizer.model``."""

    pieces: Pieces
    prefix_space: bool  # add_dummy_prefix
    unknown_id: int
    bos_id: int | None  # None: the model has no BOS (bos_id -1)


def read_model_file(path: Path) -> ModelFile:
    """What gpubpe reads of a SentencePiece BPE ``tokenizer.model``; a model gpubpe would
    encode otherwise than SentencePiece raises ModelFormatError naming why."""
    where = str(path)
    try:
        data = path.read_bytes()
        pieces, specs = _model_fields(data)
    except OSError as exc:
        raise ModelFormatError(f"{where}: cannot be read ({exc.strerror})") from None
    except (IndexError, ValueError, UnicodeDecodeError, struct.error) as exc:
        raise ModelFormatError(f"{where} is not a SentencePiece model (protobuf ModelProto): "
                               f"{exc}") from None
    trainer = _spec(specs.get(2, b""), _TRAINER_DEFAULTS)
    normalizer = _spec(specs.get(3, b""), _NORMALIZER_DEFAULTS)
    _check_model_options(trainer, normalizer, where)
    bos_id = trainer["bos_id"] if trainer["bos_id"] < 1 << 31 else None  # -1 as a varint
    return ModelFile(pieces, bool(normalizer["add_dummy_prefix"]), trainer["unk_id"], bos_id)


def _check_model_options(trainer: dict, normalizer: dict, where: str) -> None:
    """What gpubpe reads: BPE with byte fallback, spaces as "▁" before a piece, no other
    normalization (Llama 1-2, Mistral 7B, Gemma's and Phi-3's models)."""
    if trainer["model_type"] != _BPE:
        kind = _MODEL_TYPES.get(trainer["model_type"], f"model_type {trainer['model_type']}")
        raise ModelFormatError(f"{where}: a SentencePiece {kind} model, not BPE; gpubpe reads "
                               "SentencePiece BPE models only")
    refused = [why for why, bad in (
        ("no byte_fallback (a character it lacks would be <unk>)", not trainer["byte_fallback"]),
        ("treat_whitespace_as_suffix", trainer["treat_whitespace_as_suffix"]),
        (f"the normalizer {normalizer['name'].decode()!r} (a precompiled character map)",
         normalizer["precompiled_charsmap"] or normalizer["normalization_rule_tsv"]),
        ("remove_extra_whitespaces", normalizer["remove_extra_whitespaces"]),
        ("escape_whitespaces off", not normalizer["escape_whitespaces"])) if bad]
    if refused:
        raise ModelFormatError(f"{where}: a SentencePiece BPE with {', '.join(refused)}; gpubpe "
                               "reads byte-fallback BPE whose only text rule is spaces as "
                               "'▁' (Llama 2's, Mistral 7B's, Gemma's)")


def _model_fields(data: bytes) -> tuple[Pieces, dict[int, bytes]]:
    """The pieces of a ModelProto, and its other messages by field number (a message given
    twice is the two merged, as protobuf reads it: their bytes joined)."""
    texts, scores, kinds, specs = [], [], [], {}
    for number, value in _fields(data):
        if number != 1:
            specs[number] = specs.get(number, b"") + value
            continue
        piece = {1: b"", 2: b"\0\0\0\0", 3: NORMAL} | dict(_fields(value))
        texts.append(piece[1].decode("utf-8"))
        scores.append(struct.unpack("<f", piece[2])[0])
        kinds.append(piece[3])
    if not texts:
        raise ValueError("it holds no pieces")
    return Pieces(texts, scores, kinds), specs


def _spec(message: bytes, defaults: dict[str, tuple[int, object]]) -> dict:
    """The named fields of a spec message, proto2's defaults where it omits them."""
    found = dict(_fields(message))
    return {name: found.get(number, default) for name, (number, default) in defaults.items()}


def _fields(message: bytes):
    """(field number, value) of each field: an int (varint), bytes (length-delimited), or
    the 4 or 8 raw bytes of a fixed-width field. A repeated field comes once a value."""
    at = 0
    while at < len(message):
        key, at = _varint(message, at)
        wire = key & 7
        if wire == 0:
            value, at = _varint(message, at)
        elif wire == 2:
            size, at = _varint(message, at)
            value, at = message[at:at + size], at + size
            if at > len(message):
                raise ValueError("a field runs past the end")
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = message[at:at + size], at + size
        else:
            raise ValueError(f"wire type {wire} at byte {at}")
        yield key >> 3, value


def _varint(message: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = message[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


# ------------------------------------------------------------ export


def hf_sections(vocab, layout) -> dict:
    """The tokenizer.json sections (model, normalizer, pre-tokenizer, decoder) of a
    SentencePiece-style vocabulary, as transformers' converter writes Llama's: pieces with
    "▁" and their ids, <0xXX> tokens, the merges (the character rules left out: HF starts
    from characters), the text handling of ``layout``."""
    pieces = [token.decode("utf-8", "replace").replace(" ", METASPACE)
              for token in vocab.token_bytes]
    outputs, fallback = layout.output_ids.tolist(), layout.byte_fallback_ids.tolist()
    whole = [_characters(token) >= 2 for token in vocab.token_bytes]
    rules = [(left, right) for left, right, result in vocab.rules.tolist() if whole[result]]
    # A byte whose id is its fallback's is named <0xXX>, unless a merge joins it: then it
    # was a character of the vocabulary (Gemma's converter names <0x09> "\t"), and HF
    # finds merges by their strings.
    merged = {part for rule in rules for part in rule if part < 256}
    table = {f"<0x{byte:02X}>": fallback[byte] for byte in range(256)
             if byte not in merged or outputs[byte] != fallback[byte]}
    table.update((pieces[internal], output) for internal, output in enumerate(outputs)
                 if output >= 0 and (internal >= 256 or internal in merged
                                     or output != fallback[internal]))
    table.update(vocab.special_ids())  # in the model's vocab too, as HF's files have them
    merges = [[pieces[left], pieces[right]] for left, right in rules]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
             "ignore_merges": False, "vocab": dict(sorted(table.items(), key=lambda kv: kv[1])),
             "merges": merges}
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}
    decoders = [{"type": "Replace", "pattern": {"String": METASPACE}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]
    if layout.strips_space:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    normalizer, pre_tokenizer = _hf_text_handling(layout, vocab.pattern, replace)
    return {"normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "model": model,
            "decoder": {"type": "Sequence", "decoders": decoders}}


def _characters(token: bytes) -> int:
    """How many characters a token's bytes are (0 for a part of one)."""
    try:
        return len(token.decode("utf-8"))
    except UnicodeDecodeError:
        return 0


def _hf_text_handling(layout, pattern, replace: dict) -> tuple[dict | None, dict | None]:
    """(normalizer, pre-tokenizer) that ``text_rules`` reads back as ``layout`` and
    ``pattern``."""
    split = pattern == METASPACE_SPLIT
    if layout.prefix_space and layout.prefix_rule in ("always", "sentencepiece"):  # Prepend
        prepend = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": METASPACE}, replace]}
        return prepend, _metaspace("never", True) if split else None
    scheme = {"unless-space": "always", "first": "first"}[layout.prefix_rule] \
        if layout.prefix_space else "never"
    if scheme == "never" and not split:
        return replace, None
    return None, _metaspace(scheme, split)


def _metaspace(scheme: str, split: bool) -> dict:
    return {"type": "Metaspace", "replacement": METASPACE, "prepend_scheme": scheme,
            "split": split}
