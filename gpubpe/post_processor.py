"""HF post-processors as a :class:`~gpubpe.model.Template`: the special tokens HF's
``encode(text)`` puts around one sequence (``add_special_tokens=True``, its default).

HF has five kinds (``tokenizers.processors``): ``ByteLevel`` (offsets only: no ids),
``TemplateProcessing`` (its ``single`` template: special tokens, then ``$A``, then special
tokens), ``RobertaProcessing`` and ``BertProcessing`` (``cls`` before, ``sep`` after) and
``Sequence`` (Llama 3's: ByteLevel, then a template; HF 0.22 gives a second step that adds
tokens the first one's parts as a pair, [BOS] then [A]: such a file is not followed).

A template's token must be one of the file's added tokens, at the id the file gives it:
HF writes the processor's ids, so an id that differs would give other ids than HF's. Only
the one-sequence form is read; HF's pair templates (two texts in one sequence, with type
ids) are not.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import ModelFormatError
from .model import Template


def template_from_hf(processor, special_ids: dict[str, int], where: str,
                     issue: Callable[[str], None]) -> Template | None:
    """The template of a HF ``post_processor`` section (None: it adds no token), checked
    against the file's added tokens ``special_ids`` (content -> id). ``issue`` is called
    with what gpubpe cannot follow (a template token that is no added token, or at
    another id): under ``strict`` it raises; otherwise the template is dropped."""
    try:
        before, after = _wrapped(processor, f"{where}: post_processor")
    except _Unfollowed as exc:
        issue(f"post_processor: {exc} (add_special_tokens=True would add nothing)")
        return None
    if not before and not after:
        return None
    for name, token_id in (*before, *after):
        if special_ids.get(name) != token_id:
            issue(f"post_processor adds {name!r} as id {token_id}, which is not an added token "
                  "at that id (add_special_tokens=True would add nothing)")
            return None
    return Template(tuple(name for name, _ in before), tuple(name for name, _ in after))


class _Unfollowed(Exception):
    """A processor section gpubpe reads but cannot follow."""


def _wrapped(processor, where: str) -> tuple[list, list]:
    """([(token, id)] before the sequence, [(token, id)] after it) of one processor."""
    if processor is None:
        return [], []
    if not isinstance(processor, dict):
        raise ModelFormatError(f"{where} must be an object or null, not "
                               f"{type(processor).__name__}")
    kind = processor.get("type")
    if kind == "ByteLevel":
        return [], []
    if kind in ("RobertaProcessing", "BertProcessing"):
        return [_named_id(processor, "cls", where)], [_named_id(processor, "sep", where)]
    if kind == "TemplateProcessing":
        return _single_template(processor, where)
    if kind == "Sequence":
        steps = processor.get("processors")
        if not isinstance(steps, list):
            raise ModelFormatError(f"{where}: a Sequence needs a 'processors' list")
        wrapping = [wrapped for wrapped in (_wrapped(step, where) for step in steps)
                    if wrapped != ([], [])]
        if len(wrapping) > 1:  # HF's next step reads the first one's parts as a pair
            raise _Unfollowed(f"a Sequence of {len(wrapping)} steps that add tokens (HF reads "
                              "what the first gives as several sequences)")
        return wrapping[0] if wrapping else ([], [])
    raise ModelFormatError(f"{where}: type {kind!r}; expected ByteLevel, TemplateProcessing, "
                           "RobertaProcessing, BertProcessing or Sequence")


def _named_id(processor: dict, key: str, where: str) -> tuple[str, int]:
    pair = processor.get(key)
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
            and type(pair[1]) is int):
        raise ModelFormatError(f"{where}: {processor['type']}'s {key!r} must be "
                               f"[token, id], not {pair!r}")
    return pair[0], pair[1]


def _single_template(processor: dict, where: str) -> tuple[list, list]:
    items, tokens = processor.get("single"), processor.get("special_tokens") or {}
    if not isinstance(items, list) or not isinstance(tokens, dict):
        raise ModelFormatError(f"{where}: TemplateProcessing needs a 'single' list and a "
                               "'special_tokens' object")
    before: list = []
    after: list = []
    sequences = 0
    for item in items:
        if isinstance(item, dict) and "Sequence" in item:
            if (item["Sequence"] or {}).get("id") != "A":
                raise _Unfollowed(f"the single template holds {item!r}, not $A")
            sequences += 1
        elif isinstance(item, dict) and "SpecialToken" in item:
            name = (item["SpecialToken"] or {}).get("id")
            (after if sequences else before).extend(_template_tokens(tokens, name, where))
        else:
            raise ModelFormatError(f"{where}: template item {item!r}: expected a Sequence or "
                                   "a SpecialToken")
    if sequences != 1:
        raise _Unfollowed(f"the single template holds $A {sequences} times, not once")
    return before, after


def _template_tokens(tokens: dict, name, where: str) -> list[tuple[str, int]]:
    """[(token, id)] of a template's special token ``name`` (HF lets one name stand for
    several tokens)."""
    entry = tokens.get(name) if isinstance(name, str) else None
    ids = entry.get("ids") if isinstance(entry, dict) else None
    texts = entry.get("tokens") if isinstance(entry, dict) else None
    if not (isinstance(ids, list) and isinstance(texts, list) and len(ids) == len(texts)
            and all(type(i) is int for i in ids) and all(isinstance(t, str) for t in texts)):
        raise ModelFormatError(f"{where}: special token {name!r} of the template needs an "
                               "entry in 'special_tokens' with 'ids' and 'tokens' lists of "
                               "one length")
    return list(zip(texts, ids))


def hf_template_processing(template: Template, special_ids: dict[str, int]) -> dict:
    """HF's ``TemplateProcessing`` section of ``template``: ``single`` is the template,
    ``pair`` puts it around each of the two sequences (the second one's type id 1)."""
    def items(sequence: str, type_id: int) -> list[dict]:
        specials = [{"SpecialToken": {"id": name, "type_id": type_id}}
                    for name in template.before]
        return specials + [{"Sequence": {"id": sequence, "type_id": type_id}}] + [
            {"SpecialToken": {"id": name, "type_id": type_id}} for name in template.after]

    names = dict.fromkeys((*template.before, *template.after))
    return {"type": "TemplateProcessing", "single": items("A", 0),
            "pair": items("A", 0) + items("B", 1),
            "special_tokens": {name: {"id": name, "ids": [special_ids[name]], "tokens": [name]}
                               for name in names}}


def hf_bos_eos(texts: list[str], bos_id: int | None, eos_id: int | None) -> dict | None:
    """HF's ``TemplateProcessing`` of token ``bos_id`` before one sequence and ``eos_id``
    after it (indices into ``texts``, the tokens by id; None: not that one), or None."""
    before, after = ([texts[i]] if i is not None else [] for i in (bos_id, eos_id))
    if not before and not after:
        return None
    return hf_template_processing(Template(tuple(before), tuple(after)),
                                  {texts[i]: i for i in (bos_id, eos_id) if i is not None})
