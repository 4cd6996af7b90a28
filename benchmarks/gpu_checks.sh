#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in the order they are owed (BENCHMARKS.md), for one short
# lease: the fused tests on cuDNN's own kernel, then the benchmarks of the GPU goals. Each step
# has its own time limit and keeps its log in the folder given (default gpu_logs/).
#
#   benchmarks/gpu_checks.sh [log folder] [step ...]   # steps: tests scaling grid pretrain
#
# (and, named only: "compile", a grid program built with shard_map against a vmap over devices;
# "pretrain_auto", the pre-training step on the paths "auto" takes, cuDNN's fused ones at 512;
# "fig3_grid", the whole default Fig. 3 grid, 300 models at d = 128, timed from the command line,
# its results copied to the log folder)
#
# Needs jax with CUDA and the project's dependencies importable (PYTHONPATH may hold them).
set -o pipefail
out=${1:-gpu_logs}
shift || true
steps=${*:-tests scaling grid pretrain}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 JAX_PLATFORMS=cuda,cpu NORMATTN_JAX_TEST_OPTIMIZED=1 \
  XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH="$PWD:$PYTHONPATH"

step() {  # step <seconds> <name> <command ...>
  local limit=$1 name=$2
  shift 2
  [[ " $steps " == *" $name "* ]] || return 0
  echo "== $name (at most ${limit}s)"
  timeout "$limit" "$@" 2>&1 | grep -v '^[IW][0-9]' | tee "$out/$name.log" | tail -40
}

step 150 tests python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_fused.py tests/test_nnx.py
step 100 scaling python3 benchmarks/attention_scaling.py --dtype bfloat16 --batch 8 \
  --normalizations softmax,dnas,hnas --max_n 4096 --repeats 10
step 150 grid python3 benchmarks/grid_throughput.py --sizes defaults --steps 10 --repeats 3 \
  --models 1,50
step 100 pretrain python3 benchmarks/pretrain_throughput.py --config configs/albert_base.py \
  --config.model.dtype=bfloat16 --config.train.batch_size=64 \
  --config.model.attention_implementation=quadratic --rounds 3 --steps 3
step 100 pretrain_auto python3 benchmarks/pretrain_throughput.py --config configs/albert_base.py \
  --config.model.dtype=bfloat16 --config.train.batch_size=64 --rounds 3 --steps 3
step 240 compile python3 benchmarks/engine_compile.py --rounds 2 --chunks 3
step 540 fig3_grid bash -c "python3 experiments/sweep.py --config configs/case_distinction.py \
  --workdir /tmp/fig3_grid && mkdir -p '$out/fig3_grid' && cp /tmp/fig3_grid/*.json \
  /tmp/fig3_grid/history.jsonl /tmp/fig3_grid/metrics.npz /tmp/fig3_grid/*.png '$out/fig3_grid/'"
