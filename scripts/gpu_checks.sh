#!/usr/bin/env bash
# The checks only a CUDA machine can make, in one go (a few minutes on one GPU; each step is
# capped so the whole stays under 10 minutes):
#   1. tests/test_cuda.py (the real fp16 CUDA path of migrated code, `verify --device cuda`);
#   2. `ampmigrate verify --device cuda` next to `--emulate-cuda` on the same loop
#      (fixtures/loops/_cuda_written.py: .cuda(), torch.cuda.amp, an overflow forced at step 5),
#      and on fixtures/example_project/train.py;
#   3. where the apex-free optimizers have landed (tests/test_apex_numerics.py), those tests, and
#      torch's fused Adam/AdamW/SGD (what fix writes for apex's FusedAdam/FusedSGD) against the
#      unfused ones on CUDA parameters.
# Usage, from anywhere in the checkout:  scripts/gpu_checks.sh [PYTHON] > gpu-checks.md
# PYTHON defaults to .venv/bin/python (made by scripts/test.sh), else python3. stdout is a
# markdown section ready to paste into docs/verify.md ("What ran on a GPU"); progress on stderr.
# Exit status: 0 when every check passed, 1 otherwise, 2 without a CUDA device
# (GPU_CHECKS_ALLOW_CPU=1 runs it anyway, to try the script itself: the checks then fail or skip).
set -u
cd "$(dirname "$0")/.."
PY=${1:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
FAILED=0
RESULTS=()

cuda=$("$PY" -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null || echo error)
if [ "$cuda" != "True" ] && [ "${GPU_CHECKS_ALLOW_CPU:-0}" != "1" ]; then
    echo "gpu_checks: torch sees no CUDA device here ($cuda); run this on a GPU machine" >&2
    exit 2
fi

# run NAME SECONDS CMD...: run CMD with a time limit, keep its output, record pass/fail
run() {
    local name=$1 limit=$2
    shift 2
    echo "gpu_checks: $name ..." >&2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local status=$?
    local took=$((SECONDS - start))
    local verdict=passed
    [ "$status" -ne 0 ] && verdict="FAILED (exit $status)" && FAILED=1
    [ "$status" -eq 124 ] && verdict="FAILED (over ${limit} s)"
    if [ "$status" -eq 0 ] && grep -q "skipped" "$OUT/$name.log"; then
        verdict="passed, some SKIPPED (see its output)"
    fi
    RESULTS+=("| $name | \`$(printf '%q ' "$@" | sed 's/ $//')\` | $verdict | ${took} s |")
    echo "gpu_checks: $name: $verdict in ${took} s" >&2
    return "$status"
}

fence() { echo '```'; cat "$1"; echo '```'; }

echo "### What ran on a GPU"
echo
"$PY" - <<'EOF'
import platform, subprocess, torch
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
try:
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30,
    ).stdout.strip() or "?"
except OSError:
    driver = "?"
print(f"{name}, driver {driver}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"Python {platform.python_version()}; run by scripts/gpu_checks.sh")
EOF
echo

# 1. the CUDA tests
run test_cuda 240 "$PY" -m pytest tests/test_cuda.py -q -rs -p no:cacheprovider

# 2. verify --device cuda next to --emulate-cuda on the same loop
LOOP=fixtures/loops/_cuda_written.py
run verify_device_cuda 150 "$PY" -m ampmigrate verify "$LOOP" --device cuda --steps 20
run verify_emulate_cuda 150 "$PY" -m ampmigrate verify "$LOOP" --emulate-cuda --steps 20
run verify_example_cuda 150 "$PY" -m ampmigrate verify fixtures/example_project/train.py \
    --device cuda

# 3. the apex-free fused optimizers, once that work is in the tree
if [ -f tests/test_apex_numerics.py ]; then
    run apex_numerics 150 "$PY" -m pytest tests/test_apex_numerics.py -q -p no:cacheprovider
    cat >"$OUT/fused.py" <<'EOF'
"""torch's fused optimizers (what fix writes for apex's FusedAdam/FusedSGD) against the unfused
ones on CUDA parameters: 50 steps, largest relative parameter difference."""
import torch

torch.manual_seed(0)
for name, make in [
    ("Adam", lambda p, fused: torch.optim.Adam(p, lr=1e-3, fused=fused)),
    ("AdamW", lambda p, fused: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, fused=fused)),
    ("SGD", lambda p, fused: torch.optim.SGD(p, lr=1e-2, momentum=0.9, fused=fused)),
]:
    start = [torch.randn(256, 256, device="cuda"), torch.randn(256, device="cuda")]
    sides = {}
    for fused in (False, True):
        params = [t.clone().requires_grad_() for t in start]
        opt = make(params, fused)
        g = torch.Generator(device="cuda").manual_seed(1)
        for _ in range(50):
            for p in params:
                p.grad = torch.randn(p.shape, device="cuda", generator=g)
            opt.step()
        sides[fused] = params
    worst = max(
        ((a - b).abs().max() / a.abs().max()).item() for a, b in zip(sides[False], sides[True])
    )
    print(f"{name}(fused=True) vs fused=False on CUDA, 50 steps: max rel diff {worst:.3g}")
    assert worst < 1e-5, name
EOF
    run fused_optimizers 120 "$PY" "$OUT/fused.py"
else
    RESULTS+=("| fused_optimizers | (tests/test_apex_numerics.py not in this tree) | not run | |")
fi

echo "| check | command | result | time |"
echo "|---|---|---|---|"
printf '%s\n' "${RESULTS[@]}"
echo
echo "\`verify --device cuda\` next to \`--emulate-cuda\` on $LOOP:"
echo
for name in verify_device_cuda verify_emulate_cuda; do
    [ -f "$OUT/$name.log" ] || continue
    echo "$name:"
    echo
    fence "$OUT/$name.log"
    echo
done
for name in test_cuda verify_example_cuda apex_numerics fused_optimizers; do
    [ -f "$OUT/$name.log" ] || continue
    echo "<details><summary>$name output (last 30 lines)</summary>"
    echo
    tail -n 30 "$OUT/$name.log" >"$OUT/$name.tail"
    fence "$OUT/$name.tail"
    echo
    echo "</details>"
    echo
done
exit "$FAILED"
