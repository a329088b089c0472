#!/usr/bin/env bash
# One command for a GPU node: doctor, the CUDA tests on the device, then CPU-vs-GPU benchmarks.
#
#   bench/gpu_node.sh [--wheels DIR] [--extra cuda12|cuda13] [--out DIR]
#                     [--corpus FILE] [--megabytes N] [--vocab-size N] [--simulator]
#                     [--only-cpu-sweep] [--steps "sweep tests bench gpu-bench"]
#                     [--sweep-megabytes "8 64"] [--test-workers N] [--cap STEP=SECONDS]...
#                     [--loop-runs "CORPUS:SIZE,SIZE ..."]
#
# Run from the repository root after the README install (`pip install -e ".[cuda12,dev]"`
# in a venv), or pass --wheels DIR to install offline from a folder of wheels first
# (air-gapped nodes: `pip download -d DIR ".[cuda12,dev]"` on a machine with network,
# then copy DIR over). Writes into --out (default bench/out/gpu-node-DATE):
#   doctor.txt / doctor.json   devices, versions, the probe's result
#   tests.txt / tests.xml      NUMBA_ENABLE_CUDASIM=0 pytest of the CUDA tests
#   bench.json                 `gpubpe bench --backend cpu,cuda` (training + encoding vs HF/tiktoken)
#   gpu_bench.json             encode/decode/bit-level codec, CPU vs GPU, launches and syncs per MB
#   RESULTS.md                 one markdown section to paste into bench/RESULTS.md
#   cpu_sweep.md / lscpu.txt   the CPU thread sweep on 1, 2 and every core, 8 and 64 MB (issue 18), the host
# The CPU sweep runs right after doctor (it needs no GPU): a call cut short by its time limit
# still has it. --only-cpu-sweep: doctor and the sweep, nothing else.
# On a GPU node of this workplace (the `device` tool): bench/device_wheels.sh here, then
# bench/device_call.sh there (it installs the carried wheels and calls this script).
# Exit status: 0 when every step passed, 1 when tests failed, 2 when the CUDA stack is unusable.
# --steps: which steps run after doctor, in this order (default: all but merge-loop, the merge
# loop's time per merge on CPU and GPU: bench/train_bench.py --merge-loop on the demo corpus,
# merge-loop.md; and merge-phases, each phase kernel of the phased launcher timed by ncu,
# merge-phases.md; --loop-runs: the merge loop's corpora and vocab sizes, default
# "gpubpe/data/demo.txt:4096" (a .gz is read too: bench/corpora/english.txt.gz, carried;
# merge-phases uses the first corpus); and cache, a new process's first CUDA calls with the kernels' disk cache
# off, empty and filled: bench/kernel_cache_bench.py, kernel-cache.md). --sweep-megabytes: the sweep's sizes (64 MB runs 3 repeats, smaller ones 5).
# --test-workers: pytest-xdist processes for the CUDA tests, a file each (one GPU serves them
# all); each failure's traceback is written to failures.txt as it happens. --cap: a step's
# limit in seconds (a step cut short says so; the steps after it still run): a leased
# machine's minutes are few (the device tool: 15 a session, the start included).
# --simulator: a dry run of the script itself without a GPU (Numba's CUDA simulator, one test
# file; give a tiny --corpus, --megabytes 0.02 and --vocab-size 300: the simulator trains
# 8,192 tokens for over 20 minutes): its numbers mean nothing.
set -uo pipefail

wheels="" extra="cuda12" out="" corpus="" megabytes="32" vocab_size="8192" simulator=0
sweep_megabytes="8 64" test_workers=0 steps="sweep tests bench gpu-bench"
loop_runs="gpubpe/data/demo.txt:4096"
declare -A caps=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="$2"; shift 2 ;;
        --extra) extra="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --corpus) corpus="$2"; shift 2 ;;
        --megabytes) megabytes="$2"; shift 2 ;;
        --vocab-size) vocab_size="$2"; shift 2 ;;
        --simulator) simulator=1; shift ;;
        --only-cpu-sweep) steps="sweep"; shift ;;
        --steps) steps="$2"; shift 2 ;;
        --sweep-megabytes) sweep_megabytes="$2"; shift 2 ;;
        --test-workers) test_workers="$2"; shift 2 ;;
        --loop-runs) loop_runs="$2"; shift 2 ;;
        --cap) caps["${2%%=*}"]="${2#*=}"; shift 2 ;;
        -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
        *) echo "gpu_node.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done

cd "$(dirname "$0")/.." || exit 1
out="${out:-bench/out/gpu-node-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$out"
python="${PYTHON:-python}"
export NUMBA_ENABLE_CUDASIM=0   # the real device, not the simulator the test suite defaults to
tests=(tests/test_cuda.py tests/test_cuda_encode.py tests/test_cuda_pretok.py tests/test_cuda_train.py
       tests/test_backends.py tests/test_bitlevel.py tests/test_device_stats.py)
if [ "$simulator" -eq 1 ]; then
    export NUMBA_ENABLE_CUDASIM=1
    tests=(tests/test_device_stats.py)
fi

if [ -n "$wheels" ]; then
    echo "== installing gpubpe[$extra,dev] offline from $wheels"
    "$python" -m pip install --no-index --find-links "$wheels" -e ".[$extra,dev]" || exit 2
fi

echo "== gpubpe doctor"
"$python" -m gpubpe doctor | tee "$out/doctor.txt"
"$python" -m gpubpe doctor --json > "$out/doctor.json"
if grep -q '^str kernels: not in use' "$out/doctor.txt"; then
    echo "gpu_node.sh: warning: the str kernels do not run on this Python (doctor.txt says" \
         "why): the CPU sweep's list-of-str rows measure the str.encode fallback" >&2
fi
lscpu > "$out/lscpu.txt" 2>&1
capped() {  # capped STEP command...: the command, stopped after the step's --cap
    local seconds="${caps[$1]:-0}"; shift
    if [ "$seconds" -eq 0 ]; then "$@"; return; fi
    # a shell function too: its text goes with it into the shell that timeout starts
    timeout --kill-after=10 "$seconds" bash -c "$(declare -f "$1" 2>/dev/null)
\"\$@\"" capped "$@"
    local status=$?
    [ "$status" -eq 124 ] && echo "gpu_node.sh: stopped after its cap of $seconds s: $*"
    return "$status"
}
export python simulator sweep_megabytes
sweep_all() {
    local megabytes
    for megabytes in $sweep_megabytes; do
        if [ "$simulator" -eq 1 ]; then
            "$python" bench/encode_bench.py --sweep --megabytes 0.05 --repeats 2
        elif [ "$megabytes" -ge 64 ]; then  # long lists: where the shares grow (issue 18)
            "$python" bench/encode_bench.py --sweep --megabytes "$megabytes" --repeats 3
        else
            "$python" bench/encode_bench.py --sweep --megabytes "$megabytes"
        fi
    done
}
cuda_usable() {
    [ "$simulator" -eq 1 ] || grep -q '^backend cuda: available$' "$out/doctor.txt" && return 0
    echo "gpu_node.sh: the CUDA backend is not usable here (see $out/doctor.txt); fix that first" >&2
    return 1
}

tests_status=0
for step in $steps; do
    case "$step" in
    sweep)
        echo "== bench/encode_bench.py --sweep (CPU threads: 1, 2, every core; issue 18's 16-core rows)"
        capped sweep sweep_all 2>&1 | tee "$out/cpu_sweep.md" ;;
    merge-loop)
        cuda_usable || exit 2
        echo "== bench/train_bench.py --merge-loop (per merge: CPU, GPU cooperative, GPU phased)"
        loop_all() {
            local run sizes
            for run in $loop_runs; do
                IFS=, read -ra sizes <<< "${run##*:}"
                sizes=(--sizes "${sizes[@]}")
                [ "$simulator" -eq 1 ] && sizes=(--sizes 300 --max-bytes 3000)
                "$python" bench/train_bench.py --merge-loop --repeats 1 --corpus "${run%:*}" \
                    "${sizes[@]}"
            done
        }
        export loop_runs
        capped merge-loop loop_all 2>&1 | tee "$out/merge-loop.md" ;;
    cache)  # GPUBPE_CUDA_CACHE: does a new process load the kernels instead of building them?
        cuda_usable || exit 2
        echo "== bench/kernel_cache_bench.py (first CUDA calls of new processes, cache off/on)"
        copies=12
        [ "$simulator" -eq 1 ] && copies=0.001
        capped cache "$python" bench/kernel_cache_bench.py --copies "$copies" \
            $([ "$simulator" -eq 1 ] && echo --simulator) 2>&1 | tee "$out/kernel-cache.md" ;;
    merge-phases)  # where a merge's time goes: each phase its own kernel, timed by ncu
        cuda_usable || exit 2
        echo "== ncu over the phased launcher's kernels (merge-phases.csv: duration of each)"
        ncu_path=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        if [ -z "$ncu_path" ]; then echo "gpu_node.sh: no ncu here; merge-phases skipped"; continue; fi
        first_corpus="${loop_runs%% *}" && first_corpus="${first_corpus%:*}"
        capped merge-phases "$ncu_path" --clock-control none --metrics gpu__time_duration.sum \
            --csv --print-units base --launch-skip 200 --launch-count 600 \
            -k 'regex:decide|find_runs|count_deltas' \
            "$python" bench/train_bench.py --merge-loop --repeats 1 --sizes 1024 \
            --launchers phased --corpus "$first_corpus" \
            > "$out/merge-phases.csv" 2> "$out/merge-phases.log"
        "$python" - "$out/merge-phases.csv" <<'PY' | tee "$out/merge-phases.md"
import csv, re, statistics, sys
from collections import defaultdict
rows = [line for line in open(sys.argv[1], encoding="utf-8") if line.startswith('"')]
times = defaultdict(list)
for row in csv.DictReader(rows):
    if row.get("Metric Name") == "gpu__time_duration.sum":
        name = re.search(r"(decide|find_runs|count_deltas)",
                         row["Kernel Name"])
        per_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                  "msecond": 1e3}[row["Metric Unit"]]
        times[name.group(1) if name else row["Kernel Name"][:40]].append(
            float(row["Metric Value"].replace(",", "")) * per_us)
print("| phase kernel | launches | median us | mean us |")
print("|---|---:|---:|---:|")
for name, values in times.items():
    print(f"| {name} | {len(values)} | {statistics.median(values):.2f} | "
          f"{statistics.fmean(values):.2f} |")
PY
        ;;
    tests)
        cuda_usable || exit 2
        echo "== CUDA tests on the device"
        workers=()
        [ "$test_workers" -gt 0 ] && workers=(-n "$test_workers" --dist loadfile)
        GPUBPE_FAILURE_LOG="$out/failures.txt" PYTHONPATH="bench:${PYTHONPATH:-}" capped tests \
            "$python" -m pytest -p no:cacheprovider -p pytest_failure_log -rs "${workers[@]}" \
            --junitxml "$out/tests.xml" "${tests[@]}" 2>&1 | tee "$out/tests.txt"
        tests_status=${PIPESTATUS[0]} ;;
    bench)
        cuda_usable || exit 2
        echo "== gpubpe bench (training and encoding: CPU, GPU, HF tokenizers, tiktoken)"
        bench_corpus=()
        [ -n "$corpus" ] && bench_corpus=("$corpus")
        capped bench "$python" -m gpubpe bench "${bench_corpus[@]}" --backend cpu,cuda \
            --vocab-size "$vocab_size" --json "$out/bench.json" | tee "$out/bench.txt" ;;
    gpu-bench)
        cuda_usable || exit 2
        echo "== bench/gpu_bench.py (encode, decode, bit-level codec: CPU vs GPU, device counts)"
        corpus_option=()
        [ -n "$corpus" ] && corpus_option=(--corpus "$corpus")
        capped gpu-bench "$python" bench/gpu_bench.py "${corpus_option[@]}" \
            --megabytes "$megabytes" --vocab-size "$vocab_size" --doctor "$out/doctor.json" \
            --bench "$out/bench.json" --tests "$out/tests.txt" --json "$out/gpu_bench.json" \
            --markdown "$out/RESULTS.md" ;;
    *) echo "gpu_node.sh: unknown step $step (see --help)" >&2; exit 64 ;;
    esac
done

echo "== wrote $out (paste its .md files into bench/RESULTS.md)"
[ "$tests_status" -eq 0 ] || exit 1
