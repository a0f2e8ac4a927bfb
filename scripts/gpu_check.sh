#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and a CUDA build of torch; about 8 minutes at most
# (about 4 on an H200 with pytest-xdist).
#   1. the default test suite with CUDA visible (tests that load with device "auto", and the ones
#      marked for CUDA, run on the GPU), in parallel when pytest-xdist is installed
#   2. the latency profile of the shipped pair on cuda, bfloat16 (saved where sessions read it)
#   3. a short bench of the shipped pair on cuda, bfloat16: 8 HumanEval prompts, every selector,
#      budgets 16 and 64, exactly 64 new tokens (--ignore-eos), every configuration warmed up
#      first; prints summary.md
# The app's packages (streamlit, plotly, kaleido) need not be there: their tests skip, saying so,
# and the profile and bench write no plots.
# Usage: scripts/gpu_check.sh [OUT_DIR]          (default: a new results/gpu_check-<time>/)
# Python: $PYTHON, else .venv/bin/python, else python3. Exits non-zero, saying why, when there is
# no GPU, when torch cannot use it, when there is no shipped pair, or when any step fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT="${1:-results/gpu_check-$(date +%Y%m%d-%H%M%S)}"
if [ -n "${PYTHON:-}" ]; then :; elif [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"

fail() { echo "gpu_check: FAILED: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null 2>&1 \
  || fail "no nvidia-smi here: this check needs a machine with an NVIDIA GPU and its driver (nothing was run)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  || fail "nvidia-smi finds no usable GPU (nothing was run)"
"$PYTHON" - <<'EOF' || fail "torch cannot use the GPU (nothing was run); install a CUDA build of torch 2.13.0"
import sys
import torch
import transformers
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no, CPU only'}) sees no CUDA GPU"
             " (check CUDA_VISIBLE_DEVICES)")
print(f"transformers {transformers.__version__}")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s): "
      f"{torch.cuda.get_device_name(0)}, bfloat16 {'yes' if torch.cuda.is_bf16_supported() else 'NO'}")
EOF
"$PYTHON" -c "import sys; from taps.pair import default_pair_path; sys.exit(0 if default_pair_path() else 1)" \
  || fail "no shipped pair under assets/models (a folder with pair.json); nothing was run"

# this check's latency profiles go to a fresh folder, not the user's cache
export TAPS_CACHE="$(mktemp -d)"
mkdir -p "$OUT"
failed=()
step() {   # step NAME SECONDS COMMAND...
  local name="$1" limit="$2"; shift 2
  echo; echo "=== $name (at most ${limit}s) ==="
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "gpu_check: $name ran past ${limit}s" >&2
  [ $rc -ne 0 ] && failed+=("$name (exit $rc)")
  echo "=== $name: $([ $rc -eq 0 ] && echo ok || echo FAILED) in $((SECONDS - t0))s ==="
}

# per-step time limits in seconds (tests, profile, bench); GPU_CHECK_LIMITS=200,60,120 for a short lease
IFS=, read -r limit_tests limit_profile limit_bench <<< "${GPU_CHECK_LIMITS:-270,90,150}"
parallel=()
"$PYTHON" -c "import xdist" 2>/dev/null && parallel=(-n 8)
step "tests" "$limit_tests" env TAPS_TEST_DEVICE=cuda "$PYTHON" -m pytest -q -rs "${parallel[@]}"
step "profile" "$limit_profile" "$PYTHON" -m taps.profile --device cuda --dtype bfloat16 --max-nodes 128 --context 64 \
  --out "$OUT/profile"
step "bench" "$limit_bench" "$PYTHON" -m taps.bench --suite humaneval --limit 8 --selectors ar,dflash,ddtree,taps,oracle \
  --budgets 16,64 --max-new-tokens 64 --ignore-eos --device cuda --dtype bfloat16 --out "$OUT/bench"
if [ -f "$OUT/bench/summary.md" ]; then
  echo; cat "$OUT/bench/summary.md"
fi

echo
echo "gpu_check: ${SECONDS}s in all; outputs in $OUT"
[ ${#failed[@]} -eq 0 ] || fail "${failed[*]}"
echo "gpu_check: all steps passed"
