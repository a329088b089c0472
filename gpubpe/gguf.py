"""The tokenizer inside a GGUF file (llama.cpp's model format), read as HF's tokenizer.json.

A GGUF file opens with its metadata, then its tensors (often gigabytes); only the
metadata is read, through a memory map. A byte-level BPE has ``tokenizer.ggml.model``
"gpt2": ``tokens`` are HF's vocab strings by id (GPT-2's characters for bytes),
``merges`` are "left right" strings by rank, ``token_type`` marks each token normal (1),
control (3, a special token), user-defined (4, an added token such as a run of spaces)
or unused (5, a padding slot), and ``pre`` names the pre-tokenizer: llama.cpp's
convert_hf_to_gguf.py tells a model's HF pre-tokenizer apart by hashing the ids it gives
on a text, and stores only that name.

:func:`hf_tokenizer_json` turns the metadata into the tokenizer.json that model's HF
file would be, so ``interop`` imports it as any HF file and the ids are HF's. The name ->
pre-tokenizer table below is llama.cpp's (``src/llama-vocab.cpp``, llama-cpp-python 0.3.36),
written as HF steps and gpubpe's pattern names; ``tests/test_gguf.py`` checks the names
llama.cpp ships test files for against the ids HF's tokenizers gave (``models/*.gguf.out``).
A name not in the table is refused unless a pattern is given.

A SentencePiece BPE ("llama": Llama 1-2, Mistral 7B, Phi-3, Gemma 1-3) holds scored pieces
and no merges or split: it becomes the file transformers' converter writes for it
(``gpubpe.sentencepiece``); Gemma 4's ("gemma4") holds its merges and no prefix space.
Checked the same way against llama.cpp's Llama 2, Phi-3 and Gemma 4 test files.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from . import sentencepiece
from .bytes_order import hf_byte_level
from .errors import ConfigError, ModelFormatError
from .post_processor import hf_bos_eos
from .pretokenize import (
    DEEPSEEK_CODER_SPLITS,
    DEEPSEEK_LLM_SPLITS,
    DEEPSEEK_SPLITS,
    LLAMA3_PATTERN,
    O200K_PATTERN,
    QWEN2_PATTERN,
    QWEN35_PATTERN,
    TEKKEN_PATTERN,
)

MAGIC = b"GGUF"
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                   10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# A token's kind (``tokenizer.ggml.token_type``): SentencePiece's piece types.
_NORMAL, _CONTROL, _USER_DEFINED = (sentencepiece.NORMAL, sentencepiece.CONTROL,
                                    sentencepiece.USER_DEFINED)

# What llama.cpp's other tokenizer models are (``tokenizer.ggml.model``).
_OTHER_MODELS = {
    "bert": "a WordPiece vocabulary (BERT)", "t5": "a Unigram vocabulary (T5)",
    "rwkv": "RWKV's trie vocabulary", "plamo2": "PLaMo 2's vocabulary", "none": "no tokenizer",
}


def is_gguf(path: Path) -> bool:
    """Whether the file at ``path`` starts as a GGUF file does."""
    try:
        with open(path, "rb") as file:
            return file.read(4) == MAGIC
    except OSError:
        return False


def read_metadata(path) -> dict:
    """The metadata of a GGUF file (version 2 or 3) as {key: value}; arrays are lists."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size == 0:  # which mmap refuses
                raise ModelFormatError(f"{path}: the file is empty, not a GGUF file")
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _Reader(data, str(path)).metadata()
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such GGUF file") from None


class _Reader:
    """Reads GGUF's little-endian fields from a buffer, checking every length against it."""

    def __init__(self, data, where: str):
        self.data, self.at, self.where = data, 0, where

    def metadata(self) -> dict:
        if self.data[:4] != MAGIC:
            raise ModelFormatError(f"{self.where}: not a GGUF file (it starts "
                                   f"{bytes(self.data[:4])!r}, GGUF files start b'GGUF')")
        self.at = 4
        version = self.scalar("<I")
        if version not in (2, 3):
            hint = " (a big-endian file: llama.cpp's converter writes those only on request)" \
                if version > 0xFFFF else ""
            raise ModelFormatError(f"{self.where}: GGUF version {version}{hint}; gpubpe reads "
                                   "versions 2 and 3, little-endian")
        self.scalar("<Q")  # tensor count: the tensors are never read
        count = self.scalar("<Q")
        return {self.string(): self.value(self.scalar("<I")) for _ in range(count)}

    def scalar(self, fmt: str):
        size = struct.calcsize(fmt)
        self.need(size)
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value

    def string(self) -> str:
        size = self.scalar("<Q")
        self.need(size)
        raw = self.data[self.at:self.at + size]
        self.at += size
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelFormatError(f"{self.where}: a metadata string is not UTF-8: "
                                   f"{raw[:40]!r}") from None

    def value(self, kind: int):
        if kind in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.scalar("<I"), self.scalar("<Q")
            if item_kind in _SCALAR_FORMATS:
                return self.scalars(_SCALAR_FORMATS[item_kind], count)
            if item_kind == _STRING:
                return self.strings(count)
            return [self.value(item_kind) for _ in range(count)]
        raise ModelFormatError(f"{self.where}: metadata value type {kind} at byte {self.at} is "
                               "not one GGUF defines; the file is corrupt")

    def strings(self, count: int) -> list[str]:
        """An array of strings (a vocabulary: 100-250 K of them) in one loop: a call per
        string made Command-R's 256 K tokens and merges take 0.32 s to read."""
        data, at, size_at = self.data, self.at, struct.Struct("<Q").unpack_from
        raws = []
        try:
            for _ in range(count):
                (size,) = size_at(data, at)
                raws.append(data[at + 8:at + 8 + size])
                at += 8 + size
        except struct.error:
            at = len(data) + 1
        self.need(at - self.at)
        self.at = at
        try:
            return [raw.decode("utf-8") for raw in raws]
        except UnicodeDecodeError:
            bad = next(raw for raw in raws if not _is_utf8(raw))
            raise ModelFormatError(f"{self.where}: a metadata string is not UTF-8: "
                                   f"{bad[:40]!r}") from None

    def scalars(self, fmt: str, count: int) -> list:
        size = struct.calcsize(fmt) * count
        self.need(size)
        values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.data, self.at))
        self.at += size
        return values

    def need(self, size: int) -> None:
        if self.at + size > len(self.data):
            raise ModelFormatError(f"{self.where}: the GGUF metadata ends early (byte {self.at} "
                                   f"needs {size} more of {len(self.data)}); the file is "
                                   "truncated or corrupt")


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ------------------------------------------------------------ pre-tokenizers by name

def _split(text: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": text}, "behavior": "Isolated", "invert": False}


def _splits_then_bytes(*texts: str) -> dict:
    """Isolated Splits, each run on the pieces of the one before, then the bytes' characters."""
    return {"type": "Sequence", "pretokenizers": [*map(_split, texts), hf_byte_level(False)]}


_GPT2 = hf_byte_level(True)
# tokenizer.ggml.pre -> (HF pre-tokenizer, HF normalizer, HF ignore_merges): llama.cpp's
# table, for the names whose regex list gpubpe reads as HF would, written as HF steps
# (StarCoder's family splits digits with HF's Digits step: \p{N}, one each). Qwen 2's
# file holds an NFC normalizer, which llama.cpp does not apply and its test texts do not
# tell (Qwen 3.5's test has decomposed accents: it has none).
_PRE_TOKENIZERS = {
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "roberta-bpe"), (_GPT2, None, False)),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "lfm2"), (_splits_then_bytes(LLAMA3_PATTERN), None, True)),
    **dict.fromkeys(("dbrx", "smaug-bpe"), (_splits_then_bytes(LLAMA3_PATTERN), None, False)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"),
                    (_splits_then_bytes(QWEN2_PATTERN), "NFC", False)),
    "qwen35": (_splits_then_bytes(QWEN35_PATTERN), None, False),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm"), (
        {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                               _GPT2]}, None, False)),
    "deepseek-llm": (_splits_then_bytes(*DEEPSEEK_LLM_SPLITS), None, False),
    "deepseek-coder": (_splits_then_bytes(*DEEPSEEK_CODER_SPLITS), None, False),
    "deepseek-v3": (_splits_then_bytes(*DEEPSEEK_SPLITS), None, False),
    "gpt-4o": (_splits_then_bytes(O200K_PATTERN), None, False),
    "tekken": (_splits_then_bytes(TEKKEN_PATTERN), None, True),
    # Falcon's file: punctuation runs, GPT-2's, then digits on the bytes' characters.
    "falcon": ({"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"}, _GPT2,
        {"type": "Digits", "individual_digits": False}, _split("[0-9][0-9][0-9]")]},
        None, False),
}
# Names llama.cpp knows that this table leaves out, and why.
_UNREAD_PRE = {
    "default": "a GGUF converted before llama.cpp named pre-tokenizers says nothing of its split",
}


def hf_tokenizer_json(metadata: dict, where: str, pattern=None) -> dict:
    """The HF tokenizer.json the GGUF metadata stands for. With ``pattern`` (needed when
    the table lacks the file's ``tokenizer.ggml.pre``) it has no pre-tokenizer: the
    caller splits with the pattern."""
    if _check_bpe_model(metadata, where) != "gpt2":
        return _sentencepiece_json(metadata, where, pattern)
    tokens = _field(metadata, "tokenizer.ggml.tokens", list, where)
    kinds = metadata.get("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens)
    if len(kinds) != len(tokens):
        raise ModelFormatError(f"{where}: {len(kinds)} token types for {len(tokens)} tokens")
    merges = _field(metadata, "tokenizer.ggml.merges", list, where)
    pre_tokenizer, normalizer, whole_tokens = _pre_tokenizer(metadata, where, pattern)
    added = [{"id": i, "content": text, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": kind == _CONTROL}
             for i, (text, kind) in enumerate(zip(tokens, kinds))
             if kind in (_CONTROL, _USER_DEFINED) and text]
    # The added tokens are in the vocab too, as in HF's own files: HF keeps an added
    # token's id only when the vocab has it, and gives it a new one otherwise (StarCoder's
    # "<fim_prefix>", id 1, read back as 49115 until they were).
    vocab = {text: i for i, (text, kind) in enumerate(zip(tokens, kinds))
             if kind == _NORMAL or (kind in (_CONTROL, _USER_DEFINED) and text)}
    model = {"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": whole_tokens}
    return {"normalizer": normalizer and {"type": normalizer}, "pre_tokenizer": pre_tokenizer,
            "model": model, "added_tokens": added, "decoder": _GPT2,
            "post_processor": _post_processor(metadata, tokens, kinds)}


# Split names after which llama.cpp adds a BOS where the file does not say (llama-vocab.cpp:
# the Llama 3 family's); it adds one for every SentencePiece model too.
_BOS_BY_DEFAULT = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                             "pixtral", "midm-2.0", "lfm2"})


def _post_processor(metadata: dict, tokens: list, kinds: list) -> dict | None:
    """HF's post-processor of the BOS / EOS llama.cpp adds to a text (``add_special``):
    ``tokenizer.ggml.add_bos_token`` / ``add_eos_token``, else llama.cpp's defaults. Only a
    control or user-defined token is added (an added token of the HF file)."""
    bos_default = metadata.get("tokenizer.ggml.model") != "gpt2" or \
        metadata.get("tokenizer.ggml.pre") in _BOS_BY_DEFAULT
    wanted = [metadata.get(f"tokenizer.ggml.{name}_token_id") if metadata.get(
        f"tokenizer.ggml.add_{name}_token", default) else None
        for name, default in (("bos", bos_default), ("eos", False))]
    bos_id, eos_id = (i if type(i) is int and 0 <= i < len(tokens) and
                      kinds[i] in (_CONTROL, _USER_DEFINED) and tokens[i] else None
                      for i in wanted)
    return hf_bos_eos(tokens, bos_id, eos_id)


def _sentencepiece_json(metadata: dict, where: str, pattern) -> dict:
    """The HF tokenizer.json of a SentencePiece BPE GGUF (``tokenizer.ggml.model`` "llama",
    or "gemma4" with its merges): ``sentencepiece.hf_tokenizer_json`` of its pieces."""
    if pattern is not None:
        raise ConfigError(f"{where}: a SentencePiece GGUF's text is split as its model says "
                          "(not at all); it takes no pattern")
    tokens = _field(metadata, "tokenizer.ggml.tokens", list, where)
    scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    kinds = metadata.get("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens)
    if not len(kinds) == len(scores) == len(tokens):
        raise ModelFormatError(f"{where}: {len(tokens)} tokens, {len(scores)} scores and "
                               f"{len(kinds)} token types")
    pieces = sentencepiece.Pieces(tokens, scores, kinds)
    data = sentencepiece.hf_tokenizer_json(
        pieces, metadata.get("tokenizer.ggml.add_space_prefix", True),
        metadata.get("tokenizer.ggml.unknown_token_id", 0), metadata.get("tokenizer.ggml.merges"))
    return {**data, "post_processor": _post_processor(metadata, tokens, kinds)}


def _check_bpe_model(metadata: dict, where: str) -> str:
    kind = metadata.get("tokenizer.ggml.model")
    if kind in ("gpt2", "llama", "gemma4"):
        return kind
    if kind is None:
        raise ModelFormatError(f"{where}: the GGUF metadata holds no tokenizer "
                               "(no tokenizer.ggml.model)")
    what = _OTHER_MODELS.get(kind, "a tokenizer gpubpe does not know")
    raise ModelFormatError(f"{where}: tokenizer.ggml.model is {kind!r}, {what}; gpubpe reads "
                           "BPE GGUF files only: byte-level (tokenizer.ggml.model 'gpt2') and "
                           "SentencePiece's ('llama', 'gemma4')")


def _pre_tokenizer(metadata: dict, where: str, pattern):
    name = metadata.get("tokenizer.ggml.pre", "default")
    if name in _PRE_TOKENIZERS and pattern is None:
        return _PRE_TOKENIZERS[name]
    if pattern is not None:  # the caller splits with the pattern; the rest as the name says
        _, normalizer, whole_tokens = _PRE_TOKENIZERS.get(name, (None, None, False))
        return None, normalizer, whole_tokens
    why = _UNREAD_PRE.get(name, "the name is not in gpubpe's table (gpubpe.gguf)")
    raise ModelFormatError(
        f"{where}: tokenizer.ggml.pre is {name!r}: {why}. Give the split yourself: "
        "Tokenizer.from_gguf(path, pattern=...) takes a name of "
        "gpubpe.pretokenize.NAMED_PATTERNS, a regex, or a list of them run in sequence "
        "(save() the result for the command line); names read: "
        + ", ".join(sorted(_PRE_TOKENIZERS)))


def _field(metadata: dict, key: str, kind: type, where: str):
    value = metadata.get(key)
    if not isinstance(value, kind):
        raise ModelFormatError(f"{where}: {key} is missing or not a {kind.__name__}")
    return value
