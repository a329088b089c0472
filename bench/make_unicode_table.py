r"""Write ``gpubpe/data/unicode16_flags.zlib``: the scanners' character-class flags of every
code point (``gpubpe.pretokenize.code_point_flags``), and ``unicode16_punctuation.zlib``:
the ranges of ``\p{P}`` (``unicode_punctuation``, DeepSeek Coder's scanner), read from
``regex``.

Run it under a ``regex`` whose Unicode is 16.0 (2024.9.11 - 2025.9.18, the 'dev' extra's
pin), the Unicode tiktoken 0.14 and HF tokenizers' ByteLevel use. When tiktoken moves to a
newer Unicode, move the pin, rerun this, rename the file and check
``tests/test_real_vocab.py`` and ``tests/test_scanners.py`` (the newest letters).

    python bench/make_unicode_table.py
"""

import zlib
from importlib.metadata import version

from gpubpe.pretokenize import (
    UNICODE_PUNCTUATION,
    UNICODE_TABLE,
    flags_from_regex,
    punctuation_from_regex,
)


def main() -> None:
    UNICODE_TABLE.write_bytes(zlib.compress(flags_from_regex().tobytes(), 9))
    UNICODE_PUNCTUATION.write_bytes(zlib.compress(punctuation_from_regex().tobytes(), 9))
    for path in (UNICODE_TABLE, UNICODE_PUNCTUATION):
        print(f"{path}: {path.stat().st_size} bytes, regex {version('regex')}")


if __name__ == "__main__":
    main()
