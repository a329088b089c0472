"""GPT-2's byte-level alphabet: the product's copy (the oracle keeps its own in ``_reference``).

GPT-2 shows each byte as one printable character: the 188 bytes that are
already printable and not blank (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand
for themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) take
U+0100, U+0101, ... in byte order. HF's ByteLevel trainer numbers its initial
alphabet by the code point of these characters, which is the byte rank HF's
tie-break uses. ``tests/test_real_vocab.py`` checks both against the oracle.

>>> BYTE_TO_CHAR[ord("A")], BYTE_TO_CHAR[ord(" ")], BYTE_TO_CHAR[0]
('A', 'Ġ', 'Ā')
"""

from __future__ import annotations

import bisect
import itertools
import re


def _stands_for_itself(byte: int) -> bool:
    return 0x21 <= byte <= 0x7E or 0xA1 <= byte <= 0xAC or 0xAE <= byte <= 0xFF


def _byte_to_char() -> tuple[str, ...]:
    chars = []
    shifted = 0
    for byte in range(256):
        if _stands_for_itself(byte):
            chars.append(chr(byte))
        else:
            chars.append(chr(0x100 + shifted))
            shifted += 1
    return tuple(chars)


# BYTE_TO_CHAR[b]: GPT-2's character for byte b; CHAR_TO_BYTE its inverse.
BYTE_TO_CHAR: tuple[str, ...] = _byte_to_char()
CHAR_TO_BYTE: dict[str, int] = {char: byte for byte, char in enumerate(BYTE_TO_CHAR)}
# str.translate's table for ``chars_to_bytes``: each of GPT-2's characters (all below
# U+0144) to its byte's code point, any other below U+0200 to U+FFFF (past latin-1).
_TO_LATIN1 = {cp: CHAR_TO_BYTE.get(chr(cp), 0xFFFF) for cp in range(0x200)}
# HF_BYTE_RANK[b]: byte b's id in a HF ByteLevel BpeTrainer alphabet (code point order).
HF_BYTE_RANK: tuple[int, ...] = tuple(
    sorted(range(256), key=lambda b: ord(BYTE_TO_CHAR[b])).index(b) for b in range(256))


def chars_to_bytes(text: str) -> bytes:
    """The bytes a string of GPT-2's characters stands for; UnicodeEncodeError (its
    ``start`` the offending character) for any other. One ``str.translate`` and one
    latin-1 encode: loading cl100k's 100 K tokens char by char took ~0.1 s."""
    return text.translate(_TO_LATIN1).encode("latin-1")


def strings_to_bytes(texts: list[str]) -> list[bytes | None]:
    """``chars_to_bytes`` of each string, None for one holding any other character: one
    translate and one encode for all (a vocabulary's 256 K strings one by one: 0.21 s)."""
    translated = "".join(texts).translate(_TO_LATIN1)
    blob = translated.encode("latin-1", "replace")
    bounds = list(itertools.accumulate(map(len, texts), initial=0))
    pieces: list[bytes | None] = [blob[a:b] for a, b in zip(bounds, bounds[1:])]
    for match in _NOT_LATIN1.finditer(translated):  # "?" in the blob
        pieces[bisect.bisect_right(bounds, match.start()) - 1] = None
    return pieces


_NOT_LATIN1 = re.compile("[^\x00-\xff]")


def gpt2_byte_to_unicode() -> dict[int, str]:
    """``{byte: character}``, the form GPT-2's own code returns."""
    return dict(enumerate(BYTE_TO_CHAR))


def hf_byte_level(use_regex: bool, trim_offsets: bool = True) -> dict:
    """HF's ByteLevel step (pre-tokenizer, decoder or post-processor) over this alphabet, as
    ``tokenizer.json`` writes it: GPT-2's split when ``use_regex``, no prefix space."""
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets,
            "use_regex": use_regex}
