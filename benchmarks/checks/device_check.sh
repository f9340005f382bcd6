#!/usr/bin/env bash
# Device check: `prover train` with the hf engine on one GPU of a machine with no network and no SGLang,
# in under 8 minutes: the tiny policy, a random-weight model of Qwen3.5-2B's shape in bf16, and that model
# under FSDP2 on one GPU (examples/accelerate/fsdp.yaml). Tokens/s, seconds per step and peak GPU memory go
# to one JSON file (benchmarks/checks/device_check.py says what each number is).
#
#   benchmarks/checks/device_check.sh --fetch-wheels          here, with PyPI: the wheels that machine lacks, into .whl/
#   benchmarks/checks/device_check.sh [--out FILE]            there: installs them, then runs the check
#                                                      (on a lent machine: --out $OUT/device-check.json)
#   benchmarks/checks/device_check.sh --cpu                   a smoke test of the same script on CPU, toy sizes
#
# The GPU machine's python has CUDA torch, transformers, accelerate, peft, numpy, scipy, pyyaml, rich and
# einops; prover also needs pydantic and gymnasium, and Qwen3.5's linear-attention layers run much faster
# with flash-linear-attention. They travel as cp312 x86-64 wheels in .whl/ (about 5 MB) and go into a
# folder of their own on PYTHONPATH; prover itself runs from this tree (PYTHONPATH, no pip install), so
# nothing in the machine's python changes.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: benchmarks/checks/device_check.sh [options]
  --out FILE        the JSON file [device-check.json]
  --cpu             toy sizes on CPU (the script's own test)
  --steps N         RL steps per stage [3]
  --budget-s S      seconds for the three stages together [400]
  --work DIR        run folders and the built model [runs/device-check]
  --wheels DIR      the carried wheels [.whl]
  --no-fla          leave flash-linear-attention out (Qwen3.5 then runs transformers' PyTorch fallback)
  --python PY       the interpreter [.venv/bin/python if there, else python3]
  --fetch-wheels    download the wheels into --wheels (needs PyPI) and stop
EOF
}

die() { echo "device_check: $*" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
out="device-check.json" cpu="" steps=3 budget=400 work="runs/device-check" wheels=".whl" fla=1 python="" fetch=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cpu) cpu=1; shift ;;
    --no-fla) fla=""; shift ;;
    --fetch-wheels) fetch=1; shift ;;
    --out|--steps|--budget-s|--work|--wheels|--python)
      [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"
      case "$1" in
        --out) out=$2 ;; --steps) steps=$2 ;; --budget-s) budget=$2 ;; --work) work=$2 ;;
        --wheels) wheels=$2 ;; --python) python=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "--steps '$steps' is not a whole number above 0"
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || die "--budget-s '$budget' is not a whole number of seconds above 0"

# Pinned to what was tested; fla needs einops, triton>=3.3 and transformers>=5.6.2, all on that machine.
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        typing-extensions==4.16.0 gymnasium==1.4.0 farama-notifications==0.0.6
        flash-linear-attention==0.6.0 fla-core==0.6.0)
if [[ -n "$fetch" ]]; then
  pip=(python3 -m pip)
  [[ -x .venv/bin/python ]] && pip=(.venv/bin/python -m pip)
  mkdir -p "$wheels"
  "${pip[@]}" download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$wheels" "${WHEELS[@]}"
  du -sh "$wheels"
  exit 0
fi

if [[ -z "$cpu" ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no NVIDIA GPU here (nvidia-smi not found); --cpu runs the CPU smoke test"
fi
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
command -v "$python" >/dev/null 2>&1 || die "no interpreter '$python' (pass --python)"

# -- what the interpreter lacks, from the carried wheels ------------------------------------------------
need="import pydantic, gymnasium"
[[ -z "$cpu" && -n "$fla" ]] && need="$need, fla"  # fla's kernels are CUDA-only: not needed with --cpu
if ! "$python" -c "$need" 2>/dev/null; then
  shopt -s nullglob
  files=("$wheels"/*.whl)
  [[ -z "$fla" ]] && files=($(printf '%s\n' "${files[@]}" | grep -v -e '/fla_core-' -e '/flash_linear_attention-' || true))
  [[ ${#files[@]} -gt 0 ]] || die "$python lacks pydantic/gymnasium (or fla) and $wheels/ holds no wheels: \
run 'benchmarks/checks/device_check.sh --fetch-wheels' where PyPI is reachable, and bring $wheels/ along"
  site="$work-site"
  rm -rf "$site"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${files[@]}" \
    || die "installing the wheels of $wheels/ failed (they are for CPython 3.12 on x86-64)"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import prover.cli, pydantic, gymnasium" || die "prover does not import with $python (see above)"

args=(--out "$out" --steps "$steps" --budget-s "$budget" --work "$work")
[[ -n "$cpu" ]] && args+=(--cpu)
# the stages keep to --budget-s; this bound is for everything else (model build, imports, a hung process)
exec timeout --signal=TERM $((budget + 60)) "$python" -m benchmarks.checks.device_check "${args[@]}"
