"""Build the benchmark corpora from Debian packages, reproducibly.

Each corpus is UTF-8 text in ``bench/corpora/NAME.txt``; every line is a document.

- ``english``: the Linux kernel documentation (linux-doc-6.1: ``.rst``, ``.txt`` and
  ``ABI/`` files, translations left out), the Python documentation sources
  (python3.11-doc), then the fortune cookie files (fortunes-min, fortunes, ``%``
  separators dropped); each source's files in sorted path order.
- ``zh``, ``ja``, ``ko``: visible text of the LibreOffice help pages, the lines that hold
  the language's own script (the rest is untranslated English or Basic code).
- ``mix``: equal byte shares of english, zh, ja and ko, their lines spread evenly.

Packages are fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x`` into a
temporary folder; nothing is installed. Output depends only on the package versions,
which ``MANIFEST.json`` records with each corpus' size and sha256.

    python bench/corpora.py [english zh ja ko mix ...] [--mb N] [--out DIR] [--force]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "corpora"
DEFAULT_MB = {"english": 50.0, "zh": 5.0, "ja": 5.0, "ko": 5.0, "mix": 10.0}
LINUX_DOC = "linux-doc-6.1"
PYTHON_DOC = "python3.11-doc"
# corpus -> (package, folder under usr/share/libreoffice/help, the language's own script)
LIBREOFFICE_HELP = {
    "zh": ("libreoffice-help-zh-cn", "zh-CN", re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")),
    "ja": ("libreoffice-help-ja", "ja", re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")),
    "ko": ("libreoffice-help-ko", "ko", re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")),
}


# --- fetching and reading -----------------------------------------------------------------


def fetch(package: str, workdir: Path) -> tuple[str, Path]:
    """Download ``package``'s .deb into ``workdir``, unpack it; return (version, root)."""
    command = ["apt-get", "download", package]
    if os.geteuid() == 0:  # as root, apt downloads as user _apt, who cannot write to workdir
        command[1:1] = ["-o", "APT::Sandbox::User=root"]
    subprocess.run(command, cwd=workdir, check=True, stdout=subprocess.DEVNULL)
    (deb,) = workdir.glob(f"{package}_*.deb")
    version = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    root = workdir / package
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return version, root


def files_under(folder: Path) -> list[Path]:
    """Regular files below ``folder`` (symlinks skipped: they duplicate), in sorted order."""
    return sorted(
        (p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()),
        key=lambda p: p.as_posix(),
    )


def read_text(path: Path) -> str:
    """A file's text (gunzipped if ``.gz``), ``\\n`` line ends, ending with a newline."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\0", "")
    return text if text.endswith("\n") or not text else text + "\n"


class _VisibleText(HTMLParser):
    """Collects the text a reader sees on a LibreOffice help page, one block per line.

    Page chrome (head, header, side bars, footer) and scripts are skipped. A ``switch``
    holds one hidden variant per system or module (``class="MAC"``, ``"CALC"``...) and an
    unclassed default, which is the one kept.
    """

    SKIP = {"head", "script", "style", "header", "aside", "nav", "footer", "noscript"}
    BLOCK = {"p", "div", "br", "li", "tr", "td", "th", "pre", "table", "ul", "ol", "dt", "dd"}
    BLOCK |= {f"h{level}" for level in range(1, 7)}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, skipped)
        self.parts: list[str] = []

    def skipping(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.BLOCK:
            self.parts.append("\n")
        if tag in self.VOID:
            return
        names = dict(attrs)
        variant = "hidden" in names and bool(names.get("class"))
        self.stack.append((tag, self.skipping() or tag in self.SKIP or variant))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.BLOCK:
            self.parts.append("\n")
        for depth in range(len(self.stack) - 1, -1, -1):  # tolerate unclosed children
            if self.stack[depth][0] == tag:
                del self.stack[depth:]
                break

    def handle_data(self, data: str) -> None:
        if not self.skipping():
            self.parts.append(data)


HTML_SPACE = re.compile("[ \t\r\f]+")  # what HTML collapses; not U+3000 or U+00A0


def html_lines(html: str) -> list[str]:
    """Non-empty lines of visible text of an HTML page, HTML whitespace runs collapsed."""
    parser = _VisibleText()
    parser.feed(html)
    parser.close()
    lines = "".join(parser.parts).split("\n")
    return [text for line in lines if (text := HTML_SPACE.sub(" ", line).strip(" "))]


def take(lines: Iterable[str], max_bytes: int) -> Iterator[str]:
    """Whole lines from ``lines`` while their UTF-8 size (newlines included) fits."""
    total = 0
    for line in lines:
        total += len(line.encode("utf-8")) + 1
        if total > max_bytes:
            return
        yield line


# --- the corpora ----------------------------------------------------------------------------


def linux_doc_texts(root: Path) -> Iterator[str]:
    """The kernel's English documentation: .rst, .txt and ABI files, in sorted path order."""
    docs = root / f"usr/share/doc/{LINUX_DOC}/Documentation"
    for path in files_under(docs):
        relative = path.relative_to(docs).as_posix().removesuffix(".gz")
        if relative.startswith("translations/"):
            continue
        if relative.endswith((".rst", ".txt")) or relative.startswith("ABI/"):
            yield read_text(path)


def python_doc_texts(root: Path) -> Iterator[str]:
    """The Python documentation's reStructuredText sources, in sorted path order."""
    for path in files_under(root / "usr/share/doc/python3.11/html/_sources"):
        if path.name.endswith(".rst.txt"):
            yield read_text(path)


def fortune_texts(root: Path) -> Iterator[str]:
    """Fortune cookie files with their ``%`` separator lines dropped."""
    for path in files_under(root / "usr/share/games/fortunes"):
        if path.suffix != ".dat":
            lines = read_text(path).split("\n")[:-1]
            yield "".join(line + "\n" for line in lines if line != "%")


def build_english(workdir: Path, max_bytes: int) -> tuple[list[str], dict[str, str]]:
    sources = [
        (LINUX_DOC, linux_doc_texts),
        (PYTHON_DOC, python_doc_texts),
        ("fortunes-min", fortune_texts),
        ("fortunes", fortune_texts),
    ]
    versions, texts = {}, []
    for package, texts_of in sources:
        versions[package], root = fetch(package, workdir)
        texts.extend(texts_of(root))
    lines = "".join(texts).split("\n")[:-1]
    return list(take(lines, max_bytes)), versions


def libreoffice_lines(name: str, root: Path) -> Iterator[str]:
    """Help page lines holding the language's own script (many pages are part untranslated)."""
    _, folder, script = LIBREOFFICE_HELP[name]
    for page in files_under(root / "usr/share/libreoffice/help" / folder):
        if page.suffix == ".html":
            yield from filter(script.search, html_lines(read_text(page)))


def build_libreoffice(name: str, workdir: Path, max_bytes: int):
    package = LIBREOFFICE_HELP[name][0]
    version, root = fetch(package, workdir)
    return list(take(libreoffice_lines(name, root), max_bytes)), {package: version}


def build_mix(out: Path, max_bytes: int):
    """A quarter of the cap from each of english, zh, ja and ko, spread evenly.

    Line i of a part of n lines goes to position (i + 0.5) / n, ties in part order, so
    every stretch of the mix holds all four parts in proportion.
    """
    parts = ["english", "zh", "ja", "ko"]
    versions, placed = {}, []
    for order, name in enumerate(parts):
        versions.update(ensure(name, out, DEFAULT_MB[name], force=False)["packages"])
        text = (out / f"{name}.txt").read_text("utf-8")
        lines = list(take(text.split("\n")[:-1], max_bytes // len(parts)))
        placed += [((i + 0.5) / len(lines), order, line) for i, line in enumerate(lines)]
    placed.sort(key=lambda item: item[:2])
    return [line for _, _, line in placed], versions


# --- driver -----------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_manifest(out: Path) -> dict:
    path = out / "MANIFEST.json"
    return json.loads(path.read_text("utf-8")) if path.exists() else {}


def save_manifest(out: Path, manifest: dict) -> None:
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (out / "MANIFEST.json").write_text(text, "utf-8")


def ensure(name: str, out: Path, mb: float, force: bool) -> dict:
    """Build corpus ``name`` into ``out`` unless it is there; return its manifest entry."""
    target = out / f"{name}.txt"
    manifest = load_manifest(out)
    if target.exists() and name in manifest and not force:
        if manifest[name]["max_mb"] != mb:
            print(
                f"  kept {name} (built with --mb {manifest[name]['max_mb']}; --force rebuilds)",
                file=sys.stderr,
            )
        return manifest[name]
    out.mkdir(parents=True, exist_ok=True)
    max_bytes = int(mb * 1_000_000)
    started = time.perf_counter()
    if name == "mix":
        lines, versions = build_mix(out, max_bytes)
    else:
        with tempfile.TemporaryDirectory(prefix=f"gpubpe-{name}-") as tmp:
            if name == "english":
                lines, versions = build_english(Path(tmp), max_bytes)
            else:
                lines, versions = build_libreoffice(name, Path(tmp), max_bytes)
    partial = target.with_suffix(".part")
    with partial.open("w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(line + "\n" for line in lines)
    partial.replace(target)
    entry = {
        "bytes": target.stat().st_size,
        "lines": len(lines),
        "max_mb": mb,
        "packages": versions,
        "sha256": sha256_of(target),
    }
    manifest = load_manifest(out)  # mix may have added its parts meanwhile
    manifest[name] = entry
    save_manifest(out, manifest)
    print(f"  built {name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"corpora to build: {', '.join(DEFAULT_MB)} (default: all)",
    )
    parser.add_argument("--mb", type=float, help="cap on each corpus' size in MB (10^6 bytes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--force", action="store_true", help="rebuild corpora that exist")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(DEFAULT_MB))
    if unknown:
        parser.error(f"unknown corpus {', '.join(unknown)}; choose from {', '.join(DEFAULT_MB)}")
    for name in args.names or list(DEFAULT_MB):
        entry = ensure(name, args.out, args.mb or DEFAULT_MB[name], args.force)
        packages = ", ".join(f"{k} {v}" for k, v in sorted(entry["packages"].items()))
        print(
            f"{name}: {entry['bytes'] / 1e6:.2f} MB, {entry['lines']} lines, "
            f"sha256 {entry['sha256']}  [{packages}]"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
