#!/usr/bin/env bash
# GPU check: SGLang environment, one server, a few ProVer-family training steps end to end with
# engine.name=sglang, then rollout tokens/s, the prefix-cache hit ratio of branching requests and the
# weight-sync time, read from the run's metrics.jsonl.
#
#   benchmarks/checks/gpu_check.sh [--model DIR] [--steps N] [options]      (--help lists them)
#
# Needs an NVIDIA GPU and prover installed with a CUDA torch (pip install -e . without constraints/cpu.txt).
# The first run creates SGLang's own venv through `prover serve` (several minutes, about 10 GB).
# With two or more GPUs the server gets GPU 1 and the trainer GPU 0; with one, they share GPU 0.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: benchmarks/checks/gpu_check.sh [options]
  --model DIR      policy model folder (Hugging Face checkpoint); default: the smallest Qwen model found in
                   $PROVER_GPU_CHECK_MODEL, ~/.cache/huggingface/hub, /models or ~/models
  --steps N        training steps [3]
  --env NAME       environment [alfworld-sim]
  --credit NAME    credit method; it must branch for the cache ratio [spo-chain]
  --serve-gpu N    GPU of the SGLang server [1, or 0 with one GPU]
  --train-gpu N    GPU of the learner [0]
  --port P         server port [30000]
  --venv DIR       SGLang's venv (prover serve --venv) [prover serve's default]
  --sglang SPEC    what pip installs into it (prover serve --sglang) [prover serve's default]
  --python PY      an interpreter that already has sglang (prover serve --python)
  --run-dir DIR    where the run, the server logs and the sync folder go [runs/gpu-check]
  --prover CMD     the prover command [prover, else .venv/bin/prover]
EOF
}

die() { echo "gpu_check: $*" >&2; exit 2; }

model="" steps=3 env_name="alfworld-sim" credit="spo-chain" serve_gpu="" train_gpu=0 port=30000
venv="" sglang="" python="" run_dir="runs/gpu-check" prover=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --model|--steps|--env|--credit|--serve-gpu|--train-gpu|--port|--venv|--sglang|--python|--run-dir|--prover)
      [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"
      case "$1" in
        --model) model=$2 ;; --steps) steps=$2 ;; --env) env_name=$2 ;; --credit) credit=$2 ;;
        --serve-gpu) serve_gpu=$2 ;; --train-gpu) train_gpu=$2 ;; --port) port=$2 ;; --venv) venv=$2 ;;
        --sglang) sglang=$2 ;; --python) python=$2 ;; --run-dir) run_dir=$2 ;; --prover) prover=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for n in "$steps" "$train_gpu" "$port" ${serve_gpu:+"$serve_gpu"}; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "'$n' is not a whole number (--steps, --train-gpu, --serve-gpu, --port)"
done

# -- the GPU, before anything slow --------------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 || die "no NVIDIA GPU here (nvidia-smi not found); run this on a GPU machine"
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[[ "$n_gpus" -ge 1 ]] || die "nvidia-smi lists no GPU (is the driver loaded? try nvidia-smi -L)"
if [[ -z "$serve_gpu" ]]; then serve_gpu=$(( n_gpus >= 2 ? 1 : 0 )); fi
(( serve_gpu < n_gpus && train_gpu < n_gpus )) || die "GPU ids must be below $n_gpus (nvidia-smi -L)"
mem_fraction=0.8
if [[ "$serve_gpu" == "$train_gpu" ]]; then mem_fraction=0.45; fi  # the learner needs the rest of the GPU

# -- prover, with a CUDA torch -------------------------------------------------------------------------
if [[ -z "$prover" ]]; then
  if command -v prover >/dev/null 2>&1; then prover=prover
  elif [[ -x .venv/bin/prover ]]; then prover=.venv/bin/prover
  else die "no prover command (pip install -e . first, or pass --prover)"; fi
fi
prover_bin=$(command -v "$prover")
prover_python=$(dirname "$prover_bin")/python  # a console script sits beside its venv's python
[[ -x "$prover_python" ]] || prover_python=$(head -1 "$prover_bin" | sed 's/^#!//')
CUDA_VISIBLE_DEVICES=$train_gpu "$prover_python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || die "prover's torch ($prover_python) cannot see a GPU: install a CUDA torch (pip install -e . without constraints/cpu.txt)"

# -- a small model ------------------------------------------------------------------------------------
if [[ -z "$model" ]]; then
  for candidate in "${PROVER_GPU_CHECK_MODEL:-}" \
      $(ls -d ~/.cache/huggingface/hub/models--Qwen--*/snapshots/* /models/Qwen* ~/models/Qwen* 2>/dev/null || true); do
    [[ -n "$candidate" && -f "$candidate/config.json" ]] || continue
    size=$(du -sLk "$candidate" 2>/dev/null | cut -f1)
    if [[ -z "$model" || "$size" -lt "$best" ]]; then model=$candidate best=$size; fi
  done
  [[ -n "$model" ]] || die "no local model found; pass --model /path/to/Qwen3-0.6B (a Hugging Face folder)"
fi
[[ -f "$model/config.json" ]] || die "--model '$model' has no config.json (give a Hugging Face checkpoint folder)"

# -- the server -------------------------------------------------------------------------------------------
mkdir -p "$run_dir"
run_dir=$(cd "$run_dir" && pwd)
serve_args=(serve --model "$model" --gpus "$serve_gpu" --port "$port" --mem-fraction "$mem_fraction"
            --log-dir "$run_dir/sglang-logs" --timeout 1800)
[[ -n "$python" ]] && serve_args+=(--python "$python")
[[ -n "$venv" ]] && serve_args+=(--venv "$venv")
[[ -n "$sglang" ]] && serve_args+=(--sglang "$sglang")
echo "gpu_check: model $model; server on GPU $serve_gpu, learner on GPU $train_gpu; run in $run_dir"
"$prover" "${serve_args[@]}" >"$run_dir/serve.out" 2>&1 &
serve_pid=$!
trap 'kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null || true' EXIT  # prover serve stops its servers
until grep -q "Ctrl-C stops the servers" "$run_dir/serve.out" 2>/dev/null; do
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    tail -5 "$run_dir/serve.out" >&2
    die "prover serve stopped before its server was up (all of it: $run_dir/serve.out)"
  fi
  sleep 2
done

# -- training ---------------------------------------------------------------------------------------------
rm -rf "$run_dir/run" "$run_dir/sync"
if ! CUDA_VISIBLE_DEVICES=$train_gpu "$prover" train \
  model.path="$model" model.dtype=bfloat16 warmstart.enabled=false env.name="$env_name" steps="$steps" \
  credit.name="$credit" judge.name=contrast \
  rollout.groups_per_step=8 rollout.group_size=4 rollout.max_turns=10 rollout.sampling.max_new_tokens=128 \
  eval.episodes=8 learner.lr=1e-6 learner.mini_batch_rows=64 learner.micro_batch_rows=8 \
  model.chat_template_kwargs.enable_thinking=false \
  engine.name=sglang "engine.kwargs.urls=[http://127.0.0.1:$port]" engine.kwargs.sync=disk \
  engine.kwargs.sync_dir="$run_dir/sync" engine.kwargs.timeout_s=600 \
  run.dir="$run_dir/run" 2>&1 | tee "$run_dir/train.out"; then
  die "prover train failed (its output: $run_dir/train.out)"
fi

# -- the numbers ------------------------------------------------------------------------------------------
"$prover_python" - "$run_dir/run/metrics.jsonl" <<'EOF'
import json, sys

rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("phase") == "train"]
if not rows:
    sys.exit("gpu_check: metrics.jsonl has no training step")

def total(key):
    return sum(r.get(key, 0.0) for r in rows)

print(f"\n{'step':>4} {'rollout tok':>11} {'rollout s':>9} {'tok/s':>8} {'branch tok':>10} {'sync s':>7}")
for r in rows:
    tps = r["cost/rollout_tokens"] / r["time/rollout"] if r["time/rollout"] else float("nan")
    print(f"{r['step']:>4} {r['cost/rollout_tokens']:>11.0f} {r['time/rollout']:>9.2f} {tps:>8.0f} "
          f"{r.get('cost/branch_tokens', 0.0):>10.0f} {r['time/sync']:>7.2f}")
print(f"\nrollout tokens/s        {total('cost/rollout_tokens') / total('time/rollout'):.0f}")
for phase in ("branch", "rollout"):
    cached, prompt = total(f"cost/{phase}_cached_tokens"), total(f"cost/{phase}_prompt_tokens")
    share = f"{cached / prompt:.3f}" if prompt else "n/a"
    print(f"cached-token ratio      {share}  ({phase} requests: {cached:.0f} of {prompt:.0f} prompt tokens "
          "from the prefix cache)")
syncs = [r["time/sync"] for r in rows]
print(f"weight sync (disk)      mean {sum(syncs) / len(syncs):.2f} s, max {max(syncs):.2f} s over {len(syncs)} syncs")
EOF
