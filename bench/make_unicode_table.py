r"""Write ``gpubpe/data/unicode16_flags.zlib``: the scanners' character-class flags of every
code point (``gpubpe.pretokenize.code_point_flags``), and ``unicode16_punctuation.zlib``:
the ranges of ``\p{P}`` (``unicode_punctuation``, DeepSeek Coder's scanner), read from
``regex``; and from HF ``tokenizers`` (whose tables do not follow Unicode):
``hf_punctuation.zlib``, the ranges its Punctuation pre-tokenizer splits at
(``hf_punctuation_class``), and two lists its normalizers are read with
(``gpubpe.normalize``): ``hf_combining_marks.zlib``, the code points its NFC gives a
combining class, and ``hf_decomposable.zlib``, those its NFKD changes (both found by
probing each of Python's, so run it under a Python whose Unicode is newer than HF's: 3.11
has 14.0, HF 9.0).

Run it under a ``regex`` whose Unicode is 16.0 (2024.9.11 - 2025.9.18, the 'dev' extra's
pin), the Unicode tiktoken 0.14 and HF tokenizers' ByteLevel use. When tiktoken moves to a
newer Unicode, move the pin, rerun this, rename the file and check
``tests/test_real_vocab.py`` and ``tests/test_scanners.py`` (the newest letters).

    python bench/make_unicode_table.py
"""

import unicodedata
import zlib
from importlib.metadata import version

import numpy as np

from gpubpe.normalize import HF_COMBINING_MARKS, HF_DECOMPOSABLE
from gpubpe.pretokenize import (
    HF_PUNCTUATION,
    UNICODE_PUNCTUATION,
    UNICODE_TABLE,
    flags_from_regex,
    punctuation_from_regex,
)


def hf_punctuation_ranges() -> np.ndarray:
    """(first, last) ranges of the code points HF's Punctuation step puts apart."""
    from tokenizers.pre_tokenizers import Punctuation

    code_points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != ord("a")]
    pieces = Punctuation("isolated").pre_tokenize_str("a".join(map(chr, code_points)))
    return ranges_of(sorted(ord(piece) for piece, _ in pieces if len(piece) == 1 and
                            piece != "a"))


def hf_combining_mark_ranges() -> np.ndarray:
    """(first, last) ranges of the code points HF's NFC gives a combining class above 0:
    each of Python's marks that HF reorders against a mark of another class."""
    from tokenizers.normalizers import NFC

    nfc = NFC()
    marks = [chr(c) for c in range(0x110000) if unicodedata.combining(chr(c))]
    low, high = "\u0334", "\u0301"  # classes 1 and 230; "x" composes with neither
    probes = ["x" + (x + low if unicodedata.combining(x) > 1 else high + x) for x in marks]
    return ranges_of([ord(x) for x, probe in zip(marks, probes)
                      if nfc.normalize_str(probe) != probe])


def hf_decomposable_ranges() -> np.ndarray:
    """(first, last) ranges of the code points HF's NFKD changes: each of those Python
    decomposes (canonically or not) that HF's NFKD does not leave as it is."""
    from tokenizers.normalizers import NFKD

    nfkd = NFKD()
    return ranges_of([c for c in range(0x110000) if unicodedata.decomposition(chr(c)) and
                      nfkd.normalize_str(chr(c)) != chr(c)])


def ranges_of(found: list[int]) -> np.ndarray:
    """(first, last) uint32 rows of the runs of sorted code points."""
    ranges = []
    for c in found:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return np.array(ranges, dtype=np.uint32)


def main() -> None:
    UNICODE_TABLE.write_bytes(zlib.compress(flags_from_regex().tobytes(), 9))
    UNICODE_PUNCTUATION.write_bytes(zlib.compress(punctuation_from_regex().tobytes(), 9))
    HF_PUNCTUATION.write_bytes(zlib.compress(hf_punctuation_ranges().tobytes(), 9))
    HF_COMBINING_MARKS.write_bytes(zlib.compress(hf_combining_mark_ranges().tobytes(), 9))
    HF_DECOMPOSABLE.write_bytes(zlib.compress(hf_decomposable_ranges().tobytes(), 9))
    for path in (UNICODE_TABLE, UNICODE_PUNCTUATION):
        print(f"{path}: {path.stat().st_size} bytes, regex {version('regex')}")
    for path in (HF_PUNCTUATION, HF_COMBINING_MARKS, HF_DECOMPOSABLE):
        print(f"{path}: {path.stat().st_size} bytes, tokenizers {version('tokenizers')}")


if __name__ == "__main__":
    main()
