"""Make ``tests/data/multiscript.txt``, real text in several scripts for encoder parity tests.

Six parts, all real text from Debian packages (``tests/data/LICENSES.md`` names each
source, version and licence):

- english: Python library reference sources (python3.11-doc), whole files;
- code: a few pure-Python standard library modules (libpython3.11-stdlib), whole files;
- zh, ja, ko: LibreOffice help lines in the language's own script, sampled evenly;
- emoji: CLDR emoji annotation lines in English, Chinese, Japanese and Korean, sampled
  evenly, leading tabs removed (unicode-cldr-core).

The parts are interleaved in blocks of 20 lines, so any prefix of the file holds them all.

    python bench/make_multiscript.py
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import tempfile
from pathlib import Path

from corpora import (
    LIBREOFFICE_HELP,
    PYTHON_DOC,
    fetch,
    files_under,
    libreoffice_lines,
    read_text,
    take,
)
from make_demo_corpus import python_doc_licence

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data"
PART_BYTES = 200_000
BLOCK_LINES = 20
STDLIB = "libpython3.11-stdlib"
# PSF-licensed modules only: debian/copyright lists the stdlib files under other licences.
STDLIB_MODULES = (
    *("difflib.py", "fractions.py", "shlex.py", "statistics.py"),
    *(f"json/{name}.py" for name in ("__init__", "decoder", "encoder", "scanner", "tool")),
)
CLDR = "unicode-cldr-core"
CLDR_FILES = [
    f"{kind}/{lang}.xml"
    for kind in ("annotations", "annotationsDerived")
    for lang in ("en", "zh", "ja", "ko")
]


def lines_of(paths: list[Path]) -> list[str]:
    return "".join(read_text(p) for p in paths).split("\n")[:-1]


def size(lines: list[str]) -> int:
    """UTF-8 bytes of ``lines`` written one per line."""
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def spread(lines: list[str], max_bytes: int) -> list[str]:
    """Every k-th line, for the smallest k whose picks fit in ``max_bytes``."""
    return next(lines[::k] for k in itertools.count(1) if size(lines[::k]) <= max_bytes)


def is_emoji(line: str) -> bool:
    return "<annotation cp=" in line and any(
        ord(c) >= 0x1F000 or 0x2600 <= ord(c) <= 0x27BF for c in line
    )


def copyright_stanza(root: Path, package: str) -> str:
    """The ``Files: *`` paragraph of a machine-readable debian/copyright."""
    text = read_text(root / f"usr/share/doc/{package}/copyright")
    paragraphs = text.split("\n\n")
    return next(p for p in paragraphs if p.split("\n")[0].split() == ["Files:", "*"]).strip()


def build(workdir: Path) -> tuple[dict[str, list[str]], dict[str, str], dict[str, str]]:
    parts, versions, notes = {}, {}, {}

    versions[PYTHON_DOC], root = fetch(PYTHON_DOC, workdir)
    sources = root / "usr/share/doc/python3.11/html/_sources"
    parts["english"] = list(take(lines_of(files_under(sources / "library")), PART_BYTES))
    notes["psf"] = python_doc_licence(sources, versions[PYTHON_DOC].split("-")[0])

    versions[STDLIB], root = fetch(STDLIB, workdir)
    parts["code"] = lines_of([root / "usr/lib/python3.11" / m for m in STDLIB_MODULES])

    for name in ("zh", "ja", "ko"):
        package = LIBREOFFICE_HELP[name][0]
        versions[package], root = fetch(package, workdir)
        parts[name] = spread(list(libreoffice_lines(name, root)), PART_BYTES)
        notes["libreoffice"] = copyright_stanza(root, package)

    versions[CLDR], root = fetch(CLDR, workdir)
    cldr = root / "usr/share/unicode/cldr/common"
    parts["emoji"] = []
    for name in CLDR_FILES:
        emoji_lines = [line.strip() for line in lines_of([cldr / name]) if is_emoji(line)]
        parts["emoji"] += spread(emoji_lines, PART_BYTES // len(CLDR_FILES))
    notes["cldr"] = copyright_stanza(root, CLDR)
    return parts, versions, notes


def interleave(parts: dict[str, list[str]]) -> list[str]:
    blocks = [
        [lines[i : i + BLOCK_LINES] for i in range(0, len(lines), BLOCK_LINES)]
        for lines in parts.values()
    ]
    return [
        line
        for row in itertools.zip_longest(*blocks, fillvalue=[])
        for block in row
        for line in block
    ]


def licences_md(parts, versions, notes, data: bytes) -> str:
    sizes = {name: size(lines) for name, lines in parts.items()}
    rows = [
        (
            "english",
            f"`{PYTHON_DOC}` {versions[PYTHON_DOC]}",
            "`usr/share/doc/python3.11/html/_sources/library/*.rst.txt`, first files in sorted "
            "order, whole",
            "PSF License Agreement (Python documentation)",
        ),
        (
            "code",
            f"`{STDLIB}` {versions[STDLIB]}",
            "`usr/lib/python3.11/`: "
            + ", ".join(f"`{m}`" for m in STDLIB_MODULES)
            + " (whole files)",
            "PSF License Agreement (Python License)",
        ),
        *(
            (
                name,
                f"`{pkg}` {versions[pkg]}",
                "`usr/share/libreoffice/help/*/**/*.html`: "
                "visible text, lines in the language's script, every k-th line",
                "MPL-2.0 (with Apache-2.0 material)",
            )
            for name, (pkg, _, _) in LIBREOFFICE_HELP.items()
        ),
        (
            "emoji",
            f"`{CLDR}` {versions[CLDR]}",
            "`usr/share/unicode/cldr/common/{annotations,annotationsDerived}/{en,zh,ja,ko}.xml`:"
            " emoji `<annotation>` lines, every k-th, leading tabs removed",
            "Unicode-DFS-2016",
        ),
    ]
    table = "\n".join(
        f"| {name} | {sizes[name]:,} | {pkg} | {files} | {lic} |" for name, pkg, files, lic in rows
    )
    notice, terms = notes["psf"]
    return f"""# Sources and licences of `tests/data`

## `multiscript.txt`

Real text from Debian 12 packages, made by `bench/make_multiscript.py`: six parts
interleaved in blocks of {BLOCK_LINES} lines. Nothing was changed inside a line except
where the table says. {len(data):,} bytes, sha256
`{hashlib.sha256(data).hexdigest()}`.

| part | bytes | package and version | what was taken | licence |
|---|---|---|---|---|
{table}

### LibreOffice help (zh, ja, ko): `debian/copyright`, `Files: *`

The Source Code Form of these pages is subject to the terms of the Mozilla Public
License, v. 2.0. If a copy of the MPL was not distributed with this file, you can obtain
one at https://mozilla.org/MPL/2.0/ (on Debian: `/usr/share/common-licenses/MPL-2.0`).
The Source Code Form is Debian's source package `libreoffice`, version
{versions[LIBREOFFICE_HELP["zh"][0]]} (`apt-get source libreoffice`).

```text
{notes["libreoffice"]}
```

### Unicode CLDR (emoji): `debian/copyright`, `Files: *`

```text
{notes["cldr"]}
```

### Python documentation and standard library (english, code)

{notice}

```rst
{terms}
```
"""


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gpubpe-multiscript-") as tmp:
        parts, versions, notes = build(Path(tmp))
    data = "".join(line + "\n" for line in interleave(parts)).encode("utf-8")
    if b"\0" in data:
        raise ValueError("multiscript.txt must hold no NUL bytes")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multiscript.txt").write_bytes(data)
    (OUT / "LICENSES.md").write_text(licences_md(parts, versions, notes, data), "utf-8")
    counts = ", ".join(f"{name} {len(lines)}" for name, lines in parts.items())
    print(
        f"multiscript.txt: {len(data):,} bytes; lines: {counts}; "
        f"sha256 {hashlib.sha256(data).hexdigest()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
