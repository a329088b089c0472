"""Mistral's ``tekken.json`` (Nemo, Pixtral, Ministral, Small 3, Devstral ...): its tokens
and special tokens, imported with mistral-common's ids.

A tekken file holds tiktoken ranks (base64 bytes, rank = index), a split pattern and a
config. mistral-common's ``Tekkenizer`` (``mistral_common/tokens/tokenizers/tekken.py``)
reads it so, and so does :func:`from_tekken`:

- the tokens are the first ``default_vocab_size - default_num_special_tokens`` ranks, under
  tiktoken's rule (``gpubpe.interop.from_tiktoken``); a token's id is its rank plus
  ``default_num_special_tokens``: the byte tokens are ids 1000-1255 in every file so far;
- the special tokens are ids 0 to ``default_num_special_tokens - 1``: the file's
  ``special_tokens`` list (rank = id), else, in files of version v7 and older,
  mistral-common's twenty of ``DEPRECATED_SPECIAL_TOKENS``; the ids left are named
  ``<SPECIAL_{id}>``.

Mistral never matches a special token in text (``Tekkenizer.encode`` runs tiktoken with
none): gpubpe's ``encode`` raises on one unless told (``allowed_special`` or
``disallowed_special=()``, which gives Mistral's ids). Mistral's ``encode(s, bos=True)``
puts ``<s>`` (id 1) first: the template, which ``add_special_tokens=True`` adds. The image
and audio sections are not read: text only.
"""

from __future__ import annotations

import base64
import binascii

from .errors import ModelFormatError
from .interop import tiktoken_pattern_name, vocabulary_from_ranks
from .model import Template, Vocabulary

# The special tokens of a tekken file that lists none (ids 0-19), as mistral-common's
# ``Tekkenizer.DEPRECATED_SPECIAL_TOKENS`` (1.13.1) names them.
DEFAULT_SPECIAL_TOKENS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]")
_BOS = "<s>"  # mistral-common's SpecialTokens.bos
# Newer files must list their special tokens (mistral-common refuses them otherwise).
_LAST_VERSION_WITH_DEFAULTS = 7


def is_tekken(data) -> bool:
    """Whether parsed JSON is a tekken file: a ``config`` object and a ``vocab`` list."""
    return isinstance(data, dict) and isinstance(data.get("config"), dict) \
        and isinstance(data.get("vocab"), list)


def from_tekken(data: dict, where: str = "tekken.json") -> Vocabulary:
    """The vocabulary of a parsed tekken file, with mistral-common's ids (module docstring)."""
    config = data["config"]
    n_special = _config_int(config, "default_num_special_tokens", where)
    n_ranks = _config_int(config, "default_vocab_size", where) - n_special
    if not 256 <= n_ranks <= len(data["vocab"]):
        raise ModelFormatError(
            f"{where}: config asks for {n_ranks} ranks (default_vocab_size - "
            f"default_num_special_tokens), the file holds {len(data['vocab'])}; a byte-level "
            "vocabulary has at least the 256 bytes")
    pattern = config.get("pattern")
    if not isinstance(pattern, str):
        raise ModelFormatError(f"{where}: config.pattern is {pattern!r}, not a regex")
    version = str(config.get("version", "unknown"))
    specials = _special_tokens(data.get("special_tokens"), n_special, version, where)
    ranks = _ranks(data["vocab"][:n_ranks], n_special, where)
    vocab = vocabulary_from_ranks(ranks, tiktoken_pattern_name(pattern), specials,
                                  {"imported_from": f"tekken {version}"}, where)
    vocab.template = Template(before=(_BOS,)) if _BOS in specials else None
    return vocab


def _config_int(config: dict, key: str, where: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelFormatError(f"{where}: config.{key} is {value!r}, not a count")
    return value


def _ranks(entries: list, first_id: int, where: str) -> dict[bytes, int]:
    """``{token bytes: id}``: each entry's rank is its index, its id the rank + ``first_id``."""
    ranks = {}
    for index, entry in enumerate(entries):
        try:
            if entry["rank"] != index:
                raise ValueError(f"rank {entry['rank']!r} at index {index}")
            ranks[base64.b64decode(entry["token_bytes"], validate=True)] = index + first_id
        except (TypeError, KeyError, ValueError, binascii.Error) as exc:
            raise ModelFormatError(f"{where}: vocab entry {index} ({str(entry)[:80]}) is not "
                                   f"a token of consecutive rank and base64 bytes ({exc})") from None
    if len(ranks) != len(entries):
        raise ModelFormatError(f"{where}: {len(entries) - len(ranks)} vocab entries repeat "
                               "another's bytes")
    return ranks


def _special_tokens(listed, n_special: int, version: str, where: str) -> dict[str, int]:
    """``{text: id}`` of the ids below ``n_special``: the file's, or mistral-common's."""
    if listed is None:
        if _version_number(version) > _LAST_VERSION_WITH_DEFAULTS:
            raise ModelFormatError(f"{where}: a tekken file of version {version} must list its "
                                   "special_tokens (mistral-common refuses it too)")
        listed = [{"rank": i, "token_str": text} for i, text in enumerate(DEFAULT_SPECIAL_TOKENS)]
    texts = [_special_text(entry, index, where) for index, entry in enumerate(listed)]
    if len(set(texts)) != len(texts) or len(texts) > n_special:
        raise ModelFormatError(f"{where}: {len(texts)} special tokens, not all different or "
                               f"more than default_num_special_tokens={n_special}")
    texts += [f"<SPECIAL_{i}>" for i in range(len(texts), n_special)]
    return {text: i for i, text in enumerate(texts)}


def _special_text(entry, index: int, where: str) -> str:
    if not isinstance(entry, dict) or entry.get("rank") != index \
            or not isinstance(entry.get("token_str"), str):
        raise ModelFormatError(f"{where}: special_tokens[{index}] is {str(entry)[:80]}; "
                               f"expected {{'rank': {index}, 'token_str': text}}")
    return entry["token_str"]


def _version_number(version: str) -> int:
    """7 for "v7"; 0 where the version says no number."""
    digits = version[1:] if version.startswith("v") else ""
    return int(digits) if digits.isdigit() else 0

