#!/usr/bin/env bash
# There, on a GPU node of this workplace (the `device` tool's run), after
# bench/device_wheels.sh here: install the carried wheels, make this checkout importable
# as gpubpe (its kernels/ folder is gpubpe.kernels once installed: a link does it here), and
# run bench/gpu_node.sh into $OUT. Arguments go to gpu_node.sh.
#
#   run(command="bash bench/device_call.sh", carry=[".whl"], timeout_s=600)
#   run(command="bash bench/device_call.sh --only-cpu-sweep", carry=[".whl"])  # issue 18 alone
# At most 8 files come back from $OUT: the machine-readable ones (.json, .xml) are packed
# into one gpu_node.tgz at the end.
set -uo pipefail

out="${OUT:-bench/out/device-call}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
ln -sfn ../kernels gpubpe/kernels
export PYTHONPATH="$PWD:/tmp/site"
python3 -c "import gpubpe, numpy, numba; print('gpubpe from', gpubpe.__file__, '| numpy',
numpy.__version__, '| numba', numba.__version__)" || exit 2
PYTHON=python3 bench/gpu_node.sh --out "$out" "$@" 2>&1 | tee "$out/gpu_node.log"
status="${PIPESTATUS[0]}"
(cd "$out" && ls ./*.json ./*.xml >/dev/null 2>&1 && tar czf gpu_node.tgz ./*.json ./*.xml \
    && rm -f ./*.json ./*.xml)
exit "$status"
