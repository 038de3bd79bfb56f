#!/usr/bin/env bash
# One-call check of tiersim's CUDA code paths on a GPU machine: `tiersim calibrate`, `tiersim
# measure` (GPT-2 and a 2-layer Llama-3-8B) on cuda, and the calibrate/measure tests (their GPU
# tests run only where a GPU is seen). Ends within about 8 minutes (DEADLINE_S, default 450 s).
#
#   OUT=/some/dir bash benchmarks/device_check.sh      (from anywhere; $OUT gets every output)
#
# Python: the first of $PYTHON, python3, python, .venv/bin/python whose torch sees a CUDA GPU
# (DEVICE=cpu accepts a CPU-only torch and measures on the CPU: a dry run of this script).
# tiersim's own dependencies missing there (on the device image: simpy, pydantic and its
# helpers) are installed from the wheels in $WHEELS (default dist/gpu-wheels) into
# /tmp/tiersim-site, never from the network: with pip, or where pip is missing or refuses a wheel
# (pydantic_core's wheel is for CPython 3.12 only), by unpacking the wheels of the modules that
# are missing and fit this python; pytest and hypothesis likewise, when they are missing and
# their wheels are there. Failing that, a venv that sees the system's torch is tried with
# `pip install -e .` from $WHEELS alone (the machine has no network). Outputs, 8 files (the
# device tool brings back at most 8 from $OUT): summary.txt, stderr.txt, calibrate.json,
# calibrated-hardware.yaml, kernel-table.yaml (the GPU's measured kernel table,
# docs/kernels.md; DEVICE=cpu: `--kernels-dry-run`'s, the CPU's at tiny shapes),
# kernels-check.txt (a published scenario's step on the shipped and on the measured kernel
# table, then benchmarks/gemm_waves.py: measured GEMM throughput across wave boundaries
# against the model's), measure.txt (`tiersim measure` GPT-2, a 2-layer Llama-3-8B, GPT-2
# with math attention, Adafactor, fp32; one JSON report after each "=== name" line),
# pytest.txt. Exit status: 0 all ran, 1 a step failed, 3 no GPU, 4 tiersim not importable.
# dist/ is git-ignored: to fill $WHEELS on this machine before the device call (the device
# image's python is 3.12; it has numpy, networkx, yaml):
#   .venv/bin/pip download -d dist/gpu-wheels --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 simpy pydantic pytest hypothesis setuptools wheel
# and pass carry=["dist/gpu-wheels"] to the device tool.
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
OUT=${OUT:-/tmp/tiersim-device-check}
DEVICE=${DEVICE:-cuda}
WHEELS=${WHEELS:-dist/gpu-wheels}
START=$(date +%s)
DEADLINE=$((START + ${DEADLINE_S:-450}))
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
ERR=$OUT/stderr.txt
: >"$SUMMARY"
: >"$ERR"
FAILS=0

say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LIMIT_S OUTFILE COMMAND...: run with a timeout that also respects the deadline;
# stdout to OUTFILE (appended), stderr to stderr.txt; one summary line with rc and seconds.
step() {
  local name=$1 limit=$2 outfile=$3 left rc t0
  shift 3
  left=$((DEADLINE - $(date +%s) - 5))
  if [ "$left" -lt 20 ]; then
    say "SKIPPED $name: the ${DEADLINE_S:-450} s deadline is too close"
    FAILS=$((FAILS + 1))
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name: $*" >>"$ERR"
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >>"$outfile" 2>>"$ERR"
  rc=$?
  [ "$rc" -ne 0 ] && FAILS=$((FAILS + 1))
  case $rc in
    0) say "ok      $name ($(($(date +%s) - t0)) s)" ;;
    124 | 137) say "TIMEOUT $name after ${limit} s (rc $rc)" ;;
    *) say "FAILED  $name: rc $rc ($(($(date +%s) - t0)) s); see stderr.txt" ;;
  esac
  return $rc
}

say "tiersim device check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), device $DEVICE, repo $REPO"

# 1. A python whose torch sees the GPU.
if [ "$DEVICE" = cuda ]; then
  TORCH_OK='import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'
else
  TORCH_OK='import torch'
fi
PY=
for cand in "${PYTHON:-}" python3 python .venv/bin/python; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 || continue
  if timeout 120 "$cand" -c "$TORCH_OK" >>"$ERR" 2>&1; then
    PY=$(command -v "$cand")
    break
  fi
  say "python '$cand': no torch, or its torch sees no CUDA GPU"
done
command -v nvidia-smi >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
    --format=csv >>"$SUMMARY" 2>&1
if [ -z "$PY" ]; then
  say "FAIL: no python here has a torch that sees a CUDA GPU; nothing was measured"
  exit 3
fi
"$PY" -c 'import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda)
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(), "capability", torch.cuda.get_device_capability())
' >>"$SUMMARY" 2>>"$ERR"

# 2. tiersim importable by that python: the source tree, plus missing dependencies.
ORIG_PYTHONPATH=${PYTHONPATH:-}
export PYTHONPATH="$REPO${ORIG_PYTHONPATH:+:$ORIG_PYTHONPATH}"
IMPORTS='import tiersim.cli, tiersim.groundtruth.torchmodels'
SITE=/tmp/tiersim-site
# UNPACK SITE WHEEL...: unzip each wheel whose top-level modules are not all importable yet and
# whose tags fit this python (a wheel is a zip; these have no .data directory), so a module the
# system already has is never shadowed, e.g. a working pydantic by one without its core.
UNPACK='import importlib.util, platform, sys, zipfile
site, wheels = sys.argv[1], sys.argv[2:]
cp = "cp%d%d" % sys.version_info[:2]
for path in wheels:
    name = path.rsplit("/", 1)[-1][: -len(".whl")]
    py, abi, plat = name.split("-")[-3:]
    fits = (any(t in (cp, "py3", "py2") for t in py.split("."))
            and any(t in (cp, "abi3", "none") for t in abi.split("."))
            and any(t == "any" or (t.startswith(("manylinux", "linux"))
                    and t.endswith(platform.machine())) for t in plat.split(".")))
    with zipfile.ZipFile(path) as whl:
        tops = {n.split("/")[0] for n in whl.namelist()}
        mods = {t.split(".")[0] for t in tops if not t.endswith((".dist-info", ".data"))}
        if all(importlib.util.find_spec(m) is not None for m in mods):
            continue
        if not fits:
            print("not unpacked, built for another python:", name)
            continue
        whl.extractall(site)
        print("unpacked", name)'
if ! "$PY" -c "$IMPORTS" >>"$ERR" 2>&1; then
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    export PYTHONPATH="$REPO:$SITE${ORIG_PYTHONPATH:+:$ORIG_PYTHONPATH}"
    if ! step "install wheels from $WHEELS" 120 "$ERR" "$PY" -m pip install -q --no-index \
      --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl; then
      step "unpack the missing modules' wheels (pip failed)" 60 "$SUMMARY" "$PY" -c "$UNPACK" \
        "$SITE" "$WHEELS"/*.whl && FAILS=$((FAILS - 1)) # the unpacking stands in for pip
    fi
  fi
fi
if ! "$PY" -c "$IMPORTS" >>"$ERR" 2>&1; then
  if step "venv with the system's torch" 150 "$ERR" "$PY" -m venv --system-site-packages \
    /tmp/tiersim-venv && step "pip install -e . (offline, from $WHEELS)" 90 "$ERR" \
    /tmp/tiersim-venv/bin/python -m pip install -q --no-index --find-links "$WHEELS" -e "$REPO"
  then
    PY=/tmp/tiersim-venv/bin/python
  fi
fi
if ! "$PY" -c "$IMPORTS" >>"$ERR" 2>&1; then
  say "FAIL: tiersim cannot be imported by $PY (see stderr.txt); missing modules:"
  "$PY" -c 'import importlib.util as u
print(*(m for m in ("simpy","numpy","networkx","yaml","pydantic","pyarrow","matplotlib")
        if u.find_spec(m) is None))' 2>&1 | tee -a "$SUMMARY"
  say "carry them as wheels in $WHEELS (see the script's header)"
  exit 4
fi
TIERSIM=("$PY" -m tiersim.cli)
if ! "$PY" -c 'import pytest, hypothesis' >/dev/null 2>&1 && ls "$WHEELS"/*.whl >/dev/null 2>&1
then
  case ":$PYTHONPATH:" in *":$SITE:"*) ;; *) export PYTHONPATH="$PYTHONPATH:$SITE" ;; esac
  step "unpack pytest and hypothesis wheels" 60 "$SUMMARY" "$PY" -c "$UNPACK" "$SITE" \
    "$WHEELS"/*.whl
fi

# 3. Measurements, most valuable first.
mkdir -p /tmp/tiersim-cal
DRY=()
[ "$DEVICE" = cuda ] || DRY=(--kernels-dry-run) # no GPU: the kernel table's code path on the CPU
# 210 s: the kernel table's sustained shares run 30 s of back-to-back BF16 and FP8 GEMMs each
step "calibrate" 210 "$OUT/calibrate.json" "${TIERSIM[@]}" calibrate --path /tmp/tiersim-cal \
  --out "$OUT/calibrated-hardware.yaml" --kernels-out "$OUT/kernel-table.yaml" "${DRY[@]}" \
  --format json
# the measured table in use: one published H100 run's step on the shipped and on it
CHECK=$OUT/kernels-check.txt
SCENARIO=scenarios/published/nemo2407-llama2-7b-8gpus.yaml
if [ -s "$OUT/kernel-table.yaml" ]; then
  for table in h100-sxm "$OUT/kernel-table.yaml"; do
    echo "=== $SCENARIO on kernel table $table" >>"$CHECK"
    step "run $SCENARIO on $table" 60 "$CHECK" "${TIERSIM[@]}" run "$SCENARIO" \
      --set "hardware.gpu.kernels=$table" --out /tmp/tiersim-run
  done
else
  say "SKIPPED the run on the measured kernel table: calibrate wrote none (see stderr.txt)"
fi
# measure NAME ARGS...: one `tiersim measure` report into measure.txt after its name
measure() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name" >>"$OUT/measure.txt"
  step "measure $name" "$limit" "$OUT/measure.txt" "${TIERSIM[@]}" measure --device "$DEVICE" \
    --format json "$@"
}
measure gpt2 90 --model gpt2
measure "llama-3-8b, 2 layers, seq 2048" 90 --model llama-3-8b --set model.layers=2 \
  --seq-len 2048
if "$PY" -c 'import pytest, hypothesis' >/dev/null 2>&1; then
  step "pytest calibrate + kernel tables + measure" 150 "$OUT/pytest.txt" "$PY" -m pytest -q \
    -rs -p no:cacheprovider tests/test_calibrate.py tests/test_calibrate_kernels.py \
    tests/test_kernel_tables.py tests/test_measure.py
else
  say "SKIPPED pytest: pytest or hypothesis is not installed for $PY"
fi
echo "=== benchmarks/gemm_waves.py" >>"$CHECK"
step "gemm waves" 90 "$CHECK" "$PY" benchmarks/gemm_waves.py --device "$DEVICE"
measure "gpt2 --attention math" 60 --model gpt2 --attention math
measure "gpt2 --optimizer adafactor" 60 --model gpt2 --optimizer adafactor
measure "gpt2 --dtype fp32" 60 --model gpt2 --dtype fp32

say "done in $(($(date +%s) - START)) s; $FAILS step(s) failed"
[ "$FAILS" -eq 0 ]
