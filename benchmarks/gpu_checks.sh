#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, as ONE queue that fits one short loan: at most 9 minutes
# of device time, start included, so about 540 s of commands (QUEUE_SECONDS), the steps in the
# order of their value (BENCHMARKS.md, "The GPU queue"); each step's limit is its budget below:
#
#   a_engine      330 s  the engine's measurements (benchmarks/engine_speed.py): matmul peaks bf16
#                        and TF32 and the memory bandwidth; model-steps/s and share of the bf16
#                        peak at d = N = 128 and 32, float32 and bf16, before and after the step's
#                        cuts (first-token path, no L2 term); one real Table 5 grid's compile,
#                        evaluation and checkpoint seconds; then Table 5's projected time
#                        (normattn-sweep --estimate --estimate_costs: its grids' costs from a
#                        CPU's cost analysis, results/estimates/, the rates just measured, and
#                        the compiles waited for at that grid's compile seconds)
#   f_kernels      60 s  each kernel (feed-forward, fused attention) against the XLA path at the
#                        grids' shapes, written as kernel rules (f_kernels/rules.json; a killed
#                        run keeps its cases and the next loan measures the rest); merge with
#                        benchmarks/kernel_speed.py --merge <out>/f_kernels/rules.json and
#                        commit: a loan without that folder starts from the shipped rules and
#                        measures only the cases they lack for its device
#   -- optional: what time is left, else the next loan --
#   a_tests       150 s  the fused tests on cuDNN's own kernel, the export and bf16 tests
#   b_grid        160 s  50 small models in one program against one after another (goal >= 30x)
#   c_pretrain     90 s  UNAS / DNAS / HNAS time ratios, each round starting with the next scheme
#   d_fused_dnas   50 s  fused DNAS against fused softmax at N = 512 .. 2048 (goal <= 1.1x)
#   g_compile     120 s  two of Fig. 4's grids built by one compile thread, then by two
#                        (benchmarks/compile_threads.py: what the engine's second thread adds)
#   f_card_lm      90 s  the report cards' LM part at the gpu scale (experiments/card_lms.py),
#                        a slice per loan: it stops itself and resumes from its checkpoints
#   e_paper_scale  rest  the paper-scale sweeps: Table 5 at N = 128, Fig. 5's remaining d, Fig. 3
#
# Each step prints its budget, writes everything under <out>/<step>/ (log.txt; the sweeps'
# workdirs) and, when it ends well, <out>/<step>.done: the next loan, given the same folder,
# starts with the first step not done (a killed sweep resumes from its checkpoints). A step gets
# its budget or what is left of the queue, whichever is less; under MIN_STEP_SECONDS left, it
# waits for the next loan.
#
#   benchmarks/gpu_checks.sh [--dry-run] [out folder] [step ...]
#
# --dry-run (or GPU_CHECKS_DRY_RUN=1) runs every step at tiny scale on the CPU, into
# gpu_checks_dry/ by default: the queue's commands checked where no GPU is lent.
# GPU_CHECKS_CACHE=<folder> keeps jax's compilation cache there, for the next loan.
# Needs jax with CUDA and the project's dependencies importable (PYTHONPATH may hold them).
set -o pipefail
dry=${GPU_CHECKS_DRY_RUN:-0}
if [[ ${1:-} == --dry-run ]]; then dry=1; shift; fi
if [[ $dry == 1 ]]; then default_out=gpu_checks_dry; else default_out=gpu_logs; fi
out=${1:-$default_out}
shift || true
steps=${*:-a_engine f_kernels a_tests b_grid c_pretrain d_fused_dnas g_compile f_card_lm e_paper_scale}
QUEUE_SECONDS=${QUEUE_SECONDS:-540}
MIN_STEP_SECONDS=${MIN_STEP_SECONDS:-30}
KILL_GRACE=15  # seconds a step that overran gets between TERM and KILL
PY=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2 \
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ $dry == 1 ]]; then
  export JAX_PLATFORMS=cpu
else
  export JAX_PLATFORMS=cuda,cpu NORMATTN_JAX_TEST_OPTIMIZED=1
fi
# GPU_CHECKS_CACHE=<folder>: jax's compiled programs kept there, to bring to the next loan (a
# paper-scale sweep compiles a minute per grid; a fresh machine has no cache of its own)
if [[ -n ${GPU_CHECKS_CACHE:-} ]]; then
  export JAX_COMPILATION_CACHE_DIR=$GPU_CHECKS_CACHE
fi

step() {  # step <name> <budget seconds> <command ...>
  local name=$1 budget=$2
  shift 2
  [[ " $steps " == *" $name "* ]] || return 0
  if [[ -e "$out/$name.done" ]]; then
    echo "== $name: done in an earlier loan ($out/$name.done; remove it to run again)"
    return 0
  fi
  local left=$((QUEUE_SECONDS - SECONDS - KILL_GRACE))  # a killed step's grace stays inside
  local limit=$((budget < left ? budget : left))
  if ((limit < MIN_STEP_SECONDS)); then
    echo "== $name: left for the next loan (${left}s of the queue's ${QUEUE_SECONDS}s left)"
    return 0
  fi
  echo "== $name: budget ${budget}s, runs at most ${limit}s (${left}s of ${QUEUE_SECONDS}s left)"
  mkdir -p "$out/$name"
  local began=$SECONDS
  timeout -k "$KILL_GRACE" "$limit" "$@" > "$out/$name/log.txt" 2>&1
  local code=$?
  grep -v '^[IW][0-9]' "$out/$name/log.txt" | tail -25
  if ((code == 0)); then
    touch "$out/$name.done"
    echo "== $name: done in $((SECONDS - began))s"
  else
    echo "== $name: exit $code after $((SECONDS - began))s (124: out of time; runs again next loan)"
  fi
}

paper_scale() {  # paper_scale <folder> <dry 0|1> <seconds>: the sweeps one after another, each
  # stopped by --max_minutes after an evaluation (its checkpoint written) a minute before the
  # step's limit, which kills it only if that fails; the next loan resumes them
  local folder=$1 tiny=() code=0 deadline=$((SECONDS + $3 - 60))
  if [[ $2 == 1 ]]; then
    tiny=(--config.archs='("mte",)' --config.learning_rates='(0.1,)' --config.num_seeds=1
          --config.train.num_steps=16 --config.train.eval_every=4 --config.eval.val_batches=1
          --config.eval.case_set_size=4 --config.model.d_model=8 --config.task.seq_len=16)
  fi
  local -a names=(table5_n128 fig5_remaining_d fig3_full)
  local -a configs=(normattn_jax/configs/fig16_mode_lr_x_vocab.py normattn_jax/configs/fig5_first_token_lr_x_d.py
                    normattn_jax/configs/fig3_case_lr_x_d.py)
  local -a extra=("--config.task.seq_len=128" "--config.sweep.grid=(8,16,32,256,512,1024)" "")
  if [[ $2 == 1 ]]; then
    extra=("--config.sweep.grid=(2,4)" "--config.sweep.grid=(8,16)" "--config.sweep.grid=(8,)")
  fi
  for i in 0 1 2; do
    local workdir="$folder/${names[$i]}"
    [[ -e "$workdir/summary.json" ]] && { echo "-- ${names[$i]}: finished earlier"; continue; }
    local minutes
    minutes=$(awk "BEGIN { print ($deadline - $SECONDS) / 60 }")
    if awk "BEGIN { exit !($minutes < 0.5) }"; then
      echo "-- ${names[$i]}: left for the next loan"
      return 124
    fi
    echo "-- ${names[$i]}: $PY -m normattn_jax.cli.sweep --config ${configs[$i]} ${extra[$i]}" \
      "--max_minutes $minutes"
    # the dry run's own settings come last, so that they win over the queue's
    $PY -m normattn_jax.cli.sweep --config "${configs[$i]}" --workdir "$workdir" \
      --max_minutes "$minutes" ${extra[$i]:+"${extra[$i]}"} "${tiny[@]}" || code=$?
    ((code == 0)) || return $code
  done
}
card_lms() {  # card_lms <folder> <scale> <seconds> [names]: the LM part stops itself (--max_minutes)
  # half a minute before the step's limit, its checkpoints written (exit 3: not done, the next
  # loan resumes); done once every arm is and lm_board.json is written
  local minutes
  minutes=$(awk "BEGIN { m = ($3 - 30) / 60; print (m > 0.1 ? m : 0.1) }")
  $PY experiments/card_lms.py --scale="$2" --workdir="$1" --max_minutes="$minutes" \
    ${4:+--names="$4"}
}
rates_of() {  # rates_of <folder> <dtype>: "<CPU GFLOP>:<model-steps/s>,..." of the steps measured
  # after the cuts, each rate paired with the host CPU's cost analysis of the same step, the
  # measure of every grid's cost in --estimate
  $PY - "$1" "$2" <<'PY'
import re, sys
folder, dtype = sys.argv[1:]
def rows(name):
  with open(f"{folder}/{name}") as f:
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in f]
gflop = {r["d"]: r["gflop_per_model_step"] for r in rows("cpu_cost.txt")
         if r.get("task") == "first" and r.get("dtype") == dtype}
print(",".join(f"{gflop[r['d']]}:{r['model_steps_per_s']}" for r in rows("speed.txt")
               if r.get("cuts") == "after" and r.get("dtype") == dtype and r.get("d") in gflop))
PY
}
engine() {  # engine <folder> <dry 0|1>: the engine's measurements on the GPU; then Table 5
  # projected from the measured rates (training alone), in float32 and bf16, each grid's cost and
  # each measured step's from a CPU's cost analysis: the committed ones (results/estimates/, this
  # CPU's), else the host's CPU takes them while the GPU measures
  local folder=$1 pids=() dtype committed=results/estimates
  local -a speed=(--sizes defaults --sizes small --models 50 --steps 10 --repeats 3)
  local -a cost=(--archs mte --sizes 32,128 --dtypes float32,bfloat16)
  local -a table5=(--config normattn_jax/configs/fig16_mode_lr_x_vocab.py)
  local -a dtypes=(float32 bfloat16)
  if [[ $2 == 1 ]]; then
    speed=(--tiny --models 2 --steps 1 --repeats 1 --peak_sizes 256 --bandwidth_mb 16
           --dtypes float32)
    cost=(--archs mte --sizes 8 --dtypes float32 --batch_size 2)
    table5+=(--config.archs='("mte",)' --config.learning_rates='(0.1,)' --config.num_seeds=1
             --config.model.d_model=8 --config.task.seq_len=16 --config.sweep.grid='(2,4)'
             --config.eval.val_batches=1)
    dtypes=(float32)
  fi
  trap 'kill "${pids[@]}" 2>/dev/null' EXIT
  if [[ $2 == 0 && -s $committed/step_cost.txt && -s $committed/fig16_mode_lr_x_vocab.txt ]]; then
    cp "$committed/step_cost.txt" "$folder/cpu_cost.txt"
    cp "$committed/fig16_mode_lr_x_vocab.txt" "$folder/table5_costs.txt"
  else
    JAX_PLATFORMS=cpu $PY benchmarks/step_cost.py "${cost[@]}" > "$folder/cpu_cost.txt" 2>&1 &
    pids+=($!)
    JAX_PLATFORMS=cpu $PY -m normattn_jax.cli.sweep "${table5[@]}" --estimate \
      --estimate_rates=1:1 > "$folder/table5_costs.txt" 2>&1 &
    pids+=($!)
  fi
  $PY benchmarks/engine_speed.py "${speed[@]}" | tee "$folder/speed.txt" || return 1
  ((${#pids[@]} == 0)) || wait "${pids[@]}" \
    || { echo "the CPU cost analyses failed: $folder/*.txt"; return 1; }
  local compile_s  # one real Table 5 grid's, what each grid's compile is taken to be
  compile_s=$(sed -n 's/^table5_grid .* compile_s=\([0-9.]*\) .*/\1/p' "$folder/speed.txt")
  for dtype in "${dtypes[@]}"; do
    echo "-- Table 5 projected from the $dtype rates: --estimate_rates=$(rates_of "$folder" "$dtype")"
    $PY -m normattn_jax.cli.sweep "${table5[@]}" --estimate \
      --estimate_costs "$folder/table5_costs.txt" \
      --estimate_rates="$(rates_of "$folder" "$dtype")" \
      ${compile_s:+--estimate_compile_s="$compile_s"} | tail -1 || return 1
  done
}
kernel_rules() {  # kernel_rules <rules file> <kernel_speed.py flags ...>: a new file starts as
  # the shipped rules (normattn_jax/kernels/measured.json, an earlier loan's merged in), so the
  # cases they hold for this device are not measured again and a --merge keeps them beside the
  # new ones
  local rules=$1
  shift
  mkdir -p "$(dirname "$rules")"
  [[ -e $rules ]] || cp normattn_jax/kernels/measured.json "$rules" || return 1
  $PY benchmarks/kernel_speed.py --out "$rules" "$@"
}
export -f paper_scale card_lms rates_of engine kernel_rules
export PY

if [[ $dry == 1 ]]; then
  step a_engine 330 bash -c 'engine "$1" 1' _ "$out/a_engine"
  step f_kernels 60 bash -c 'kernel_rules "$@"' _ "$out/f_kernels/rules.json" --sizes 8 \
    --dtypes float32 --layouts mte --normalizations softmax --models 2 --batch 2 --repeats 1
  step a_tests 150 $PY -m pytest -q -p no:cacheprovider -m "not slow" tests/test_export_check.py \
    tests/test_precision.py -k "fused_export_is_caught or host_callback or dtype_problems or \
    refuse_bf16"
  step b_grid 160 $PY benchmarks/grid_throughput.py --sizes small --models 1,2 --steps 1 \
    --repeats 1 --cpu_devices 1 --peak_sizes 256
  step c_pretrain 90 $PY benchmarks/pretrain_throughput.py --config albert_tiny \
    --config.model.num_hidden_layers=1 --config.model.hidden_size=32 \
    --config.model.intermediate_size=64 --config.model.embedding_size=16 \
    --config.train.batch_size=2 --config.data.max_seq_length=32 \
    --config.model.max_position_embeddings=32 --rounds 2 --steps 1
  step d_fused_dnas 50 $PY benchmarks/attention_scaling.py --normalizations softmax,dnas \
    --max_n 256 --min_n 256 --repeats 1
  step g_compile 120 $PY benchmarks/compile_threads.py --grids 2 --rounds 1 \
    --config.model.d_model=8 --config.model.num_heads=2 --config.sweep.grid='(4,8)'
  step f_card_lm 90 bash -c 'card_lms "$1" smoke "$2" ssmax' _ "$out/f_card_lm/run" \
    "$((90 < QUEUE_SECONDS - SECONDS - KILL_GRACE ? 90 : QUEUE_SECONDS - SECONDS - KILL_GRACE))"
  step e_paper_scale $QUEUE_SECONDS bash -c 'paper_scale "$1" 1 "$2"' _ "$out/e_paper_scale" \
    "$((QUEUE_SECONDS - SECONDS - KILL_GRACE))"
else
  step a_engine 330 bash -c 'engine "$1" 0' _ "$out/a_engine"
  step f_kernels 60 bash -c 'kernel_rules "$@"' _ "$out/f_kernels/rules.json"
  step a_tests 150 bash -c "$PY -m pytest -q -p no:cacheprovider -n 8 tests/test_fused.py \
    tests/test_nnx.py && $PY -m pytest -q -p no:cacheprovider -n 8 -m 'not slow' \
    tests/test_export_check.py tests/test_precision.py"
  step b_grid 160 $PY benchmarks/grid_throughput.py --sizes small --sizes defaults \
    --models 1,50 --steps 10 --repeats 3
  step c_pretrain 90 $PY benchmarks/pretrain_throughput.py --config albert_base \
    --config.model.dtype=bfloat16 --config.train.batch_size=64 --rounds 3 --steps 3
  step d_fused_dnas 50 $PY benchmarks/attention_scaling.py --dtype bfloat16 --batch 8 \
    --normalizations softmax,dnas --min_n 512 --max_n 2048 --repeats 10
  step g_compile 120 $PY benchmarks/compile_threads.py --grids 2 --rounds 1
  step f_card_lm 90 bash -c 'card_lms "$1" gpu "$2"' _ "$out/f_card_lm/run" \
    "$((90 < QUEUE_SECONDS - SECONDS - KILL_GRACE ? 90 : QUEUE_SECONDS - SECONDS - KILL_GRACE))"
  step e_paper_scale $QUEUE_SECONDS bash -c 'paper_scale "$1" 0 "$2"' _ "$out/e_paper_scale" \
    "$((QUEUE_SECONDS - SECONDS - KILL_GRACE))"
fi
echo "== queue: ${SECONDS}s of ${QUEUE_SECONDS}s; done: $(cd "$out" && ls ./*.done 2>/dev/null \
  | xargs -r -n1 basename | tr '\n' ' ')"
