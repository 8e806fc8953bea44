#!/usr/bin/env bash
# bench/gpu_record.sh: the live GPU record (issue 40) in ONE run on a lent GPU machine.
#
# Steps, most valuable first; each runs under its own `timeout`, its status, exit code and
# wall time go to $OUT/steps.tsv and its output to $WORK/logs/STEP.log. After every step the
# small results are packed into $OUT (record.tar.gz: reports, key_averages, CSVs, logs;
# captures.tar.gz: .ncu-rep, .nsys-rep, .sqlite), so a run cut at the device's limit still
# returns what it had. One failed step never stops the others; a later step whose input is
# missing fails on its own.
#
#   setup            carried wheels (.whl/*.whl) for nvtx and msgspec, nsys from Nsight
#                    Compute's folder onto PATH, Debian's libdw/libelf (.whl/debs/) when absent
#   versions         nvidia-smi, driver, CUDA, torch, cuDNN, nsys, ncu, ... -> $OUT/versions.txt
#   doctor           nsbridge doctor
#   cnn_triage       nsbridge triage --deep=3 examples/train_cnn.py (1 epoch of 12 steps)
#   cnn_timeline     nsbridge timeline --run runs/cnn
#   cnn_nsys_stats   nsys stats --report cuda_gpu_kern_sum --format csv on its export
#   oracle_cnn       bench/gpu_record/oracle.py: torch.profiler by hand + key_averages CSV
#   ncu_conv         ncu --set full on the kernels of one conv call (ncu_cases.py --case conv)
#   ncu_attention    the same for one scaled_dot_product_attention call
#   compile_triage   nsbridge triage bench/gpu_record/compile_model.py (torch.compile)
#   cudagraph_triage nsbridge triage --nsys bench/gpu_record/cudagraph_model.py (graph replay)
#   cudagraph_nsys_stats
#   gate_same        nsbridge gate . . gate_model.py: unchanged code (expect PASS)
#   gate_bf16        --new-env GPU_RECORD_DTYPE=bfloat16 (expect the dtype switch named)
#   gate_extra       --new-env GPU_RECORD_EXTRA_KERNEL=1 (expect REGRESSED)
#   bert_triage      nsbridge triage --deep=3 bench/gpu_record/bert_step.py (bert-base shape)
#   oracle_bert      the oracle on the BERT model
#   compare          bench/gpu_record/compare.py -> $OUT/comparisons.md (always runs)
#
# On the device (the `run` tool of this workplace), from the repository root:
#   command: bash bench/gpu_record.sh      carry: [".whl"]      timeout_s: 590
# with .whl/ prepared here first (it is git-ignored; both commands on this CPU machine):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl nvtx==0.2.10 msgspec
#   mkdir -p .whl/debs && (cd .whl/debs && apt-get download libdw1 libelf1)   # Debian bookworm
# Back here, read the record with
#   python bench/gpu_record/compare.py FOLDER_WITH_THE_RETURNED_FILES
#
# CPU mode (no working nvidia-smi, GPU_RECORD_CPU=1, or --cpu / --dry-run): the GPU-only
# steps are recorded as "skipped: no GPU"; setup, versions, doctor, small CPU triages of the
# CNN and a 2-layer BERT, the oracles and compare run (about a minute), to test the plumbing.
#
# Settings (environment): OUT (default /tmp/gpu_record_out), GPU_RECORD_WORK (an empty or new
# folder; default a fresh /tmp/gpu_record.XXXXXX), GPU_RECORD_BUDGET (seconds for the whole
# run, default 540: steps that would start later are "skipped: budget"), GPU_RECORD_RESERVE
# (seconds kept for compare, default 45), GPU_RECORD_PYTHON (default .venv/bin/python when
# present, else python3), GPU_RECORD_CPU=1, GPU_RECORD_BERT_MAX_LAUNCHES (the BERT deep
# pass's launch cap, default 100; nsbridge's deep profile says 200), GPU_RECORD_GATE_ARGS (the
# gate script's arguments), GPU_RECORD_ONLY (the steps to run, by name, space-separated;
# setup and compare always run).
set -u
export LC_ALL=C

for arg in "$@"; do
    case $arg in
        --cpu|--dry-run) export GPU_RECORD_CPU=1 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_record.sh: unknown argument $arg (--cpu, --dry-run, --help)" >&2; exit 2 ;;
    esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-/tmp/gpu_record_out}
WORK=${GPU_RECORD_WORK:-$(mktemp -d /tmp/gpu_record.XXXXXX)}
BUDGET=${GPU_RECORD_BUDGET:-540}
RESERVE=${GPU_RECORD_RESERVE:-45}
BERT_MAX_LAUNCHES=${GPU_RECORD_BERT_MAX_LAUNCHES:-100}
# a GPU-bound step (about 14 ms of fp32 matmuls on an H200): at the script's own size (2 ms,
# launch-bound) the step time varied 17% between processes and 3 pairs could not decide
GATE_ARGS=${GPU_RECORD_GATE_ARGS:---steps 12 --batch-size 4096 --dim 2048}
SITE=/tmp/gpu_record_site
LIBS=/tmp/gpu_record_libs
if [[ -n ${GPU_RECORD_PYTHON:-} ]]; then PY=$GPU_RECORD_PYTHON
elif [[ -x $ROOT/.venv/bin/python ]]; then PY=$ROOT/.venv/bin/python
else PY=python3; fi
if [[ ${GPU_RECORD_CPU:-0} != 1 ]] && command -v nvidia-smi >/dev/null 2>&1 \
        && nvidia-smi -L >/dev/null 2>&1; then
    HAVE_GPU=1; MODE=gpu
else
    HAVE_GPU=0; MODE=cpu
fi
if [[ -d $WORK && -n $(ls -A "$WORK" 2>/dev/null) ]]; then
    echo "gpu_record.sh: $WORK is not empty; name a new folder in GPU_RECORD_WORK" >&2
    exit 2
fi
mkdir -p "$OUT" "$WORK/logs" "$WORK/runs" || exit 2
export ROOT OUT WORK PY HAVE_GPU MODE SITE LIBS BERT_MAX_LAUNCHES GATE_ARGS
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

now() { printf '%s' "${EPOCHREALTIME:-$(date +%s.%N)}"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "[gpu_record $(date +%T) +${SECONDS}s] $*" | tee -a "$WORK/logs/driver.log"; }

printf 'step\tstatus\trc\twall_s\tnote\n' > "$OUT/steps.tsv"
record() {   # STEP STATUS RC WALL_S NOTE
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$OUT/steps.tsv"
    say "$(printf '%-21s %-22s rc=%-4s %7ss  %s' "$1" "$2" "$3" "$4" "$5")"
}

CAPTURES='\.(ncu-rep|nsys-rep|qdrep|sqlite)'
pack_one() {   # NAME captures|small: tar what fits (each file under a cap, the tar < 15 MiB)
    local name=$1 which=$2 cap list sig tmp="$OUT/.$1.tmp"
    if [[ $which == captures ]]; then   # MBs of binary: packed again only when they changed
        sig=$(cd "$WORK" && find . -type f -printf '%P %s %T@\n' | grep -E "$CAPTURES " |
              sort | md5sum)
        [[ -f $OUT/$name && $sig == "$(cat "$WORK/.sig.$name" 2>/dev/null)" ]] && return 0
        echo "$sig" > "$WORK/.sig.$name"
    fi
    for cap in 8192 4096 2048 1024 256; do
        list=$(cd "$WORK" && find . -type f ! -name '*.qdstrm' ! -name '.sig.*' \
                   -size -"${cap}"k | sort |
               if [[ $which == captures ]]; then grep -E "$CAPTURES\$"; else grep -Ev "$CAPTURES\$"; fi)
        [[ -z $list ]] && return 0
        printf '%s\n' "$list" | tar -czf "$tmp" -C "$WORK" -T - 2>>"$WORK/logs/pack.log"
        if [[ -f $tmp && $(stat -c %s "$tmp") -lt $((15 * 1024 * 1024)) ]]; then
            mv -f "$tmp" "$OUT/$name"
            return 0
        fi
    done
    rm -f "$tmp"
    echo "pack: $name did not fit under 15 MiB even with 256 KiB files" >> "$WORK/logs/pack.log"
}
pack() {
    (cd "$WORK" && find . -type f \( -name '*.qdstrm' -o -size +8192k \) -printf '%s\t%P\n' \
        > left_behind.tsv)
    cp -f "$OUT/steps.tsv" "$WORK/steps.tsv"
    pack_one record.tar.gz small
    pack_one captures.tar.gz captures
}

# run_step STEP KIND LIMIT_S NOTE CMD...   KIND gpu: "skipped: no GPU" in CPU mode
run_step() {
    local name=$1 kind=$2 limit=$3 note=$4 left rc status t0 log="$WORK/logs/$1.log"
    shift 4
    if [[ -n ${GPU_RECORD_ONLY:-} && " $GPU_RECORD_ONLY compare " != *" $name "* ]]; then
        record "$name" "skipped: not asked" "" 0 "GPU_RECORD_ONLY=$GPU_RECORD_ONLY"
        return 0
    fi
    if [[ $kind == gpu && $HAVE_GPU != 1 ]]; then
        record "$name" "skipped: no GPU" "" 0 "$note"
        return 0
    fi
    left=$((BUDGET - RESERVE - SECONDS))
    if [[ $name == compare ]]; then left=$((BUDGET - SECONDS > 20 ? BUDGET - SECONDS : 20)); fi
    if ((left < 10)); then
        record "$name" "skipped: budget" "" 0 "budget ${BUDGET}s, ${SECONDS}s used; $note"
        return 0
    fi
    ((limit > left)) && limit=$left
    say "start $name (limit ${limit}s)"
    printf '# %s\n# limit %ss, started %s\n' "$*" "$limit" "$(date -u +%FT%TZ)" > "$log"
    t0=$(now)
    timeout -k 10 "$limit" "$@" >> "$log" 2>&1 < /dev/null
    rc=$?
    case $rc in
        0) status=ok ;;
        124|137) status="timeout (${limit}s)" ;;
        *) status=failed ;;
    esac
    record "$name" "$status" "$rc" "$(secs "$t0" "$(now)")" "$note"
    if ((rc != 0)); then tail -n 6 "$log" | sed 's/^/    | /'; fi
    pack
    return 0
}
step_fn() {   # STEP KIND LIMIT NOTE FUNCTION ARGS: an exported shell function under timeout
    local a=$1 b=$2 c=$3 d=$4
    shift 4
    run_step "$a" "$b" "$c" "$d" bash -c '"$@"' gpu_record "$@"
}

# -- the steps' bodies (exported: each runs in its own bash under timeout) ---------------
nsb() { "$PY" -m nsbridge "$@"; }

versions() {
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "mode: $MODE"
        echo "host: $(uname -a)"
        echo "repo: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo 'no git')"
        echo "--- nvidia-smi"
        nvidia-smi 2>&1 | head -n 15 || true
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm \
            --format=csv 2>&1 || true
        echo "--- python"
        "$PY" -c 'import sys, platform; print("python", sys.version.split()[0], sys.executable)
import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
    torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
for name in ("transformers", "triton", "nvtx", "msgspec", "numpy", "pandas", "nsbridge", "ncu_report"):
    try:
        m = __import__(name); print(name, getattr(m, "__version__", "?"), m.__file__)
    except Exception as e:
        print(name, "not importable:", type(e).__name__, e)' 2>&1
        echo "--- nsys"
        if command -v nsys >/dev/null; then command -v nsys; nsys --version 2>&1; else echo "nsys: not on PATH"; fi
        echo "--- ncu"
        if command -v ncu >/dev/null; then command -v ncu; ncu --version 2>&1; else echo "ncu: not on PATH"; fi
        echo "--- C compiler (torch.compile's Triton launcher needs one)"
        { cc --version || gcc --version; } 2>&1 | head -n 1
        echo "--- LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
        echo "--- PATH=$PATH"
    } > "$WORK/versions.txt" 2>&1
    cp -f "$WORK/versions.txt" "$OUT/versions.txt"
}

export_ncu_csv() {   # FOLDER: the raw page of every .ncu-rep there that has none
    local rep
    for rep in "$1"/*.ncu-rep; do
        [[ -f $rep && ! -s ${rep%.ncu-rep}.raw.csv ]] || continue
        command -v ncu >/dev/null || { echo "no ncu to export $rep"; return 0; }
        ncu --import "$rep" --csv --page raw > "${rep%.ncu-rep}.raw.csv" ||
            echo "ncu --import $rep failed"
    done
}

triage_run() {   # RUN ARGS...: nsbridge triage --out runs/RUN ARGS...
    local run=$1 rc
    shift
    nsb triage --out "$WORK/runs/$run" "$@"
    rc=$?
    export_ncu_csv "$WORK/runs/$run"
    return $rc
}

timeline_run() {   # RUN
    nsb timeline --run "$WORK/runs/$1" --timeout 120
}

nsys_stats() {   # RUN: cuda_gpu_kern_sum of the run's export, as CSV in nsys/
    local sqlite
    sqlite=$(find "$WORK/runs/$1" -maxdepth 1 -name '*.sqlite' | sort | head -n 1)
    [[ -n $sqlite ]] || { echo "no .sqlite in runs/$1 (the timeline step)"; return 2; }
    mkdir -p "$WORK/nsys"
    nsys stats --report cuda_gpu_kern_sum --format csv --output "$WORK/nsys/$1" "$sqlite" &&
        return 0
    echo "cuda_gpu_kern_sum failed: trying the report's older name, gpukernsum"
    nsys stats --report gpukernsum --format csv --output "$WORK/nsys/$1" "$sqlite"
}

oracle_run() {   # MODEL [--tiny]
    "$PY" "$ROOT/bench/gpu_record/oracle.py" --model "$1" --prefix "$WORK/oracle/$1" "${@:2}"
}

ncu_capture() {   # CASE (conv | attention): --set full on the kernels of one call
    local case=$1 rep="$WORK/ncu/$1" pattern
    mkdir -p "$WORK/ncu"
    ncu --target-processes all --nvtx --nvtx-include "gpu_record_target/" --set full \
        --launch-count 4 -f -o "$rep" \
        "$PY" "$ROOT/bench/gpu_record/ncu_cases.py" --case "$case"
    if [[ ! -s $rep.ncu-rep ]]; then
        echo "the NVTX filter profiled nothing: picking the kernel by name instead"
        if [[ $case == conv ]]; then pattern='regex:conv|fprop|implicit|xmma|cudnn|sm90'
        else pattern='regex:flash|fmha|attention|sdpa|mha'; fi
        ncu --target-processes all --kernel-name "$pattern" --launch-skip 3 --launch-count 1 \
            --set full -f -o "$rep" "$PY" "$ROOT/bench/gpu_record/ncu_cases.py" --case "$case"
    fi
    [[ -s $rep.ncu-rep ]] || { echo "no $rep.ncu-rep"; return 3; }
    ncu --import "$rep.ncu-rep" --csv --page raw > "$rep.raw.csv" || return 4
    ncu --import "$rep.ncu-rep" --csv --page details --print-nvtx-rename kernel \
        > "$rep.details.csv" || echo "details page not exported"
}

gate_run() {   # NAME PROCESSES [--new-env NAME=VALUE]: answered = gate.json written
    local name=$1 processes=$2 rc
    shift 2
    mkdir -p "$WORK/gates"
    nsb gate --processes "$processes" --steps 8 --timeout 90 --format md \
        --out "$WORK/gates/$name" "$@" . . bench/gpu_record/gate_model.py -- $GATE_ARGS
    rc=$?
    echo "nsbridge gate exit code: $rc (0 pass, 1 regression, 4 inconclusive, 5 refused)"
    [[ -f $WORK/gates/$name/gate.json ]] && return 0
    return "$rc"
}

export -f nsb versions export_ncu_csv triage_run timeline_run nsys_stats oracle_run \
    ncu_capture gate_run

# -- setup (in this shell: it sets PATH, PYTHONPATH and LD_LIBRARY_PATH for the rest) ----
setup() {
    local cand libdir
    echo "mode $MODE, python $PY, work $WORK, out $OUT, budget ${BUDGET}s"
    if ! "$PY" -c 'import nvtx, msgspec' 2>/dev/null; then
        if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$SITE" "$ROOT"/.whl/*.whl || echo "pip install failed"
            export PYTHONPATH="$SITE:$PYTHONPATH"
        else
            echo "nvtx or msgspec missing and no .whl/*.whl carried"
        fi
    fi
    if ! command -v ncu >/dev/null && [[ -x /usr/local/cuda/bin/ncu ]]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
    if ! command -v nsys >/dev/null; then
        for cand in /opt/nvidia/nsight-systems/*/bin/nsys \
                /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys \
                /usr/local/cuda*/nsight-compute*/host/target-linux-x64/nsys; do
            if [[ -x $cand ]]; then
                export PATH="$(dirname "$cand"):$PATH"
                echo "nsys from $cand"
                break
            fi
        done
    fi
    if compgen -G "$ROOT/.whl/debs/*.deb" >/dev/null && ! ldconfig -p 2>/dev/null |
            grep -q 'libdw\.so\.1'; then
        mkdir -p "$LIBS"
        for cand in "$ROOT"/.whl/debs/*.deb; do dpkg -x "$cand" "$LIBS" || echo "dpkg -x $cand failed"; done
        libdir=$(find "$LIBS" -name 'libdw.so.1' -printf '%h\n' | head -n 1)
        [[ -n $libdir ]] && export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "libdw/libelf from .whl/debs: ${libdir:-not found}"
    fi
    sed -E "s/^(  max_launches:)[[:space:]]*[0-9]+/\1 $BERT_MAX_LAUNCHES/" \
        "$ROOT/profiles/deep.yaml" > "$WORK/deep-capped.yaml"
    "$PY" -c 'import sys, nsbridge, nvtx, msgspec
from nsbridge.profiles import load_profile
print("nsbridge", nsbridge.__version__, "from", nsbridge.__file__)
print("deep-capped.yaml: max_launches", load_profile(sys.argv[1]).deep.max_launches)' \
        "$WORK/deep-capped.yaml"
}
t0=$(now)
setup > "$WORK/logs/setup.log" 2>&1
rc=$?
record setup "$([[ $rc == 0 ]] && echo ok || echo failed)" "$rc" "$(secs "$t0" "$(now)")" \
    "mode $MODE"
((rc != 0)) && tail -n 6 "$WORK/logs/setup.log" | sed 's/^/    | /'

# -- the record, most valuable first ----------------------------------------------------
step_fn versions any 60 "-> versions.txt" versions
run_step doctor any 120 "" "$PY" -m nsbridge doctor
if ((HAVE_GPU)); then
    step_fn cnn_triage any 240 "--deep=3, 12 steps" triage_run cnn --deep=3 --timeout 180 \
        examples/train_cnn.py -- --epochs 1 --steps 12
else
    step_fn cnn_triage any 120 "CPU variant: no --deep, 8 steps of 8" triage_run cnn \
        --timeout 90 examples/train_cnn.py -- --steps 8 --batch-size 8
fi
step_fn cnn_timeline gpu 180 "timeline --run runs/cnn" timeline_run cnn
step_fn cnn_nsys_stats gpu 90 "cuda_gpu_kern_sum" nsys_stats cnn
if ((HAVE_GPU)); then
    step_fn oracle_cnn any 90 "" oracle_run cnn
else
    step_fn oracle_cnn any 90 "CPU variant: --tiny" oracle_run cnn --tiny
fi
step_fn ncu_conv gpu 120 "--set full, one conv call" ncu_capture conv
step_fn ncu_attention gpu 120 "--set full, one SDPA call" ncu_capture attention
step_fn compile_triage gpu 240 "torch.compile" triage_run compile --timeout 200 \
    bench/gpu_record/compile_model.py -- --steps 12
step_fn cudagraph_triage gpu 180 "--nsys, CUDA graph replay" triage_run cudagraph --nsys \
    --timeout 120 bench/gpu_record/cudagraph_model.py -- --steps 12
step_fn cudagraph_nsys_stats gpu 90 "cuda_gpu_kern_sum" nsys_stats cudagraph
step_fn gate_same gpu 200 "3 processes a side, expect PASS" gate_run same 3
step_fn gate_bf16 gpu 150 "2 a side, expect the dtype named" gate_run bf16 2 \
    --new-env GPU_RECORD_DTYPE=bfloat16
step_fn gate_extra gpu 150 "2 a side, expect REGRESSED" gate_run extra 2 \
    --new-env GPU_RECORD_EXTRA_KERNEL=1
if ((HAVE_GPU)); then
    step_fn bert_triage any 270 "--deep=3, max_launches $BERT_MAX_LAUNCHES" triage_run bert \
        --deep=3 --deep-profile "$WORK/deep-capped.yaml" --timeout 220 \
        bench/gpu_record/bert_step.py -- --steps 8
else
    step_fn bert_triage any 180 "CPU variant: 2 layers, hidden 128, no --deep" triage_run \
        bert --timeout 150 bench/gpu_record/bert_step.py -- --tiny --steps 7 --batch-size 2 \
        --seq 32
fi
if ((HAVE_GPU)); then
    step_fn oracle_bert any 120 "" oracle_run bert
else
    step_fn oracle_bert any 120 "CPU variant: --tiny" oracle_run bert --tiny
fi
run_step compare any "$RESERVE" "-> comparisons.md" "$PY" "$ROOT/bench/gpu_record/compare.py" \
    "$WORK" --steps-tsv "$OUT/steps.tsv" --out "$OUT/comparisons.md"
pack

say "done in ${SECONDS}s: $OUT holds $(cd "$OUT" && ls | tr '\n' ' ')"
column -t -s $'\t' "$OUT/steps.tsv" 2>/dev/null || cat "$OUT/steps.tsv"
if [[ -f $OUT/comparisons.md ]]; then grep -m1 '^Input:' "$OUT/comparisons.md"; fi
exit 0
