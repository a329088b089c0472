r"""Write ``gpubpe/data/unicode16_flags.zlib``: the scanners' character-class flags of every
code point (``gpubpe.pretokenize.code_point_flags``), and ``unicode16_punctuation.zlib``:
the ranges of ``\p{P}`` (``unicode_punctuation``, DeepSeek Coder's scanner), read from
``regex``; and ``hf_punctuation.zlib``: the ranges HF's Punctuation pre-tokenizer splits at
(``hf_punctuation_class``), read from HF ``tokenizers`` (its table does not follow Unicode).

Run it under a ``regex`` whose Unicode is 16.0 (2024.9.11 - 2025.9.18, the 'dev' extra's
pin), the Unicode tiktoken 0.14 and HF tokenizers' ByteLevel use. When tiktoken moves to a
newer Unicode, move the pin, rerun this, rename the file and check
``tests/test_real_vocab.py`` and ``tests/test_scanners.py`` (the newest letters).

    python bench/make_unicode_table.py
"""

import zlib
from importlib.metadata import version

import numpy as np

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
    found = sorted(ord(piece) for piece, _ in pieces if len(piece) == 1 and piece != "a")
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
    for path in (UNICODE_TABLE, UNICODE_PUNCTUATION):
        print(f"{path}: {path.stat().st_size} bytes, regex {version('regex')}")
    print(f"{HF_PUNCTUATION}: {HF_PUNCTUATION.stat().st_size} bytes, "
          f"tokenizers {version('tokenizers')}")


if __name__ == "__main__":
    main()
