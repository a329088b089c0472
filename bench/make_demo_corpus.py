"""Make ``gpubpe/data/demo.txt``, the small English corpus shipped inside gpubpe.

The text is the Python 3.11 FAQ, HOWTOs and tutorial: their reStructuredText sources from
Debian's python3.11-doc, whole files concatenated unchanged in sorted path order (about
1.1 MB of English prose with code examples). It is under the PSF License Agreement, which
lets anyone copy and redistribute it if the licence and copyright notice go with it; this
script writes both into ``gpubpe/data/DEMO_LICENSE.md``.

    python bench/make_demo_corpus.py
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

from corpora import PYTHON_DOC, fetch, files_under, read_text

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "gpubpe" / "data"
SOURCES = "usr/share/doc/python3.11/html/_sources"
FOLDERS = ("faq", "howto", "tutorial")


def python_doc_licence(sources: Path, release: str) -> tuple[str, str]:
    """(copyright notice, licence terms) as the Python documentation states them."""
    notice = read_text(sources / "copyright.rst.txt").split("\n\n", 1)[1]
    notice = notice.split("-------", 1)[0].strip()
    terms = read_text(sources / "license.rst.txt")
    start = terms.index("Terms and conditions for accessing or otherwise using Python")
    end = terms.index(".. _OtherLicenses:")
    return notice, terms[start:end].replace("|release|", release).strip()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gpubpe-demo-") as tmp:
        version, root = fetch(PYTHON_DOC, Path(tmp))
        sources = root / SOURCES
        paths = [p for p in files_under(sources) if p.name.endswith(".rst.txt")]
        paths = [p for p in paths if p.relative_to(sources).parts[0] in FOLDERS]
        text = "".join(read_text(p) for p in paths)
        release = version.split("-")[0]  # Debian 3.11.2-6+deb12u8 is upstream 3.11.2
        notice, terms = python_doc_licence(sources, release)
        names = [p.relative_to(root).as_posix() for p in paths]

    data = text.encode("utf-8")
    if not 1_000_000 <= len(data) <= 2_000_000 or b"\0" in data:
        raise ValueError(f"demo corpus is {len(data)} bytes; it must be 1-2 MB without NULs")
    (DATA / "demo.txt").write_bytes(data)
    listing = "\n".join(f"- `{name}`" for name in names)
    licence = f"""# Licence of `demo.txt`

`demo.txt` is the Python {release} documentation's FAQ, HOWTOs and tutorial: the
reStructuredText sources of the pages below, from the Debian package `{PYTHON_DOC}`
version `{version}`. They are concatenated in the order listed, each file whole and
unchanged; that is the only change made. `bench/make_demo_corpus.py` rebuilds it.

The Python documentation states that "Python software and documentation are licensed
under the PSF License Agreement" (`license.rst`); the package's `debian/copyright` names
the Python License for the whole upstream source. The notice and terms below are copied
from the documentation's own `copyright.rst` and `license.rst`.

## Copyright notice

{notice}

## Licence terms

```rst
{terms}
```

## Files taken ({len(names)}, {len(data):,} bytes, sha256 `{hashlib.sha256(data).hexdigest()}`)

{listing}
"""
    (DATA / "DEMO_LICENSE.md").write_text(licence, "utf-8")
    print(
        f"demo.txt: {len(data):,} bytes, {text.count(chr(10)):,} lines, {len(names)} files, "
        f"{PYTHON_DOC} {version}, sha256 {hashlib.sha256(data).hexdigest()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
