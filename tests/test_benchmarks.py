"""Every benchmark script runs end to end at its smallest size (``make test-all``): they are not
imported by the library, so a change elsewhere can break one unseen. Their numbers are
BENCHMARKS.md's; of those, the GPU queue's table is checked against the queue's committed logs."""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNS = {
    "attention_scaling": ["--max_n", "128", "--repeats", "1", "--normalizations", "softmax,dnas",
                          "--dtype", "bfloat16", "--batch", "2"],
    "grid_throughput": ["--models", "1,2", "--steps", "1", "--repeats", "1", "--sizes", "small"],
    "pretrain_throughput": ["--rounds", "1", "--steps", "1", "--config.train.batch_size=2",
                            "--config.data.max_seq_length=16"],
    "finetune_throughput": ["--seeds", "2", "--widths", "1", "--steps", "1", "--rounds", "1",
                            "--seq_len", "16", "--batch_size", "2"],
    "step_profile": ["--d_model", "8", "--seq_len", "8", "--steps", "1"],
    "microbatches": ["--d_model", "8", "--seq_len", "8", "--microbatches", "1,2", "--rounds",
                     "1", "--steps", "1"],
    "engine_compile": ["--rounds", "1", "--chunks", "1", "--sizes", "test"],
    "cpu_levers": ["--levers", "default,processes", "--rounds", "1", "--num_models", "2",
                   "--steps", "1", "--repeats", "1", "--d_model", "16"],
    "suite_profile": ["tests/test_norms.py", "-n", "0"],
    "machine_probe": ["--rounds", "1"],
    "kernel_speed": ["--sizes", "8", "--dtypes", "float32", "--layouts", "mte",
                     "--normalizations", "softmax", "--models", "2", "--batch", "2",
                     "--repeats", "1"],
    "hlo_arrays": ["--archs", "nap", "--implementations", "auto"],
    "step_cost": ["--archs", "mte", "--sizes", "8", "--dtypes", "float32", "--batch_size", "2",
                  "--cuts"],
    "engine_speed": ["--tiny", "--models", "2", "--steps", "1", "--repeats", "1", "--peak_sizes",
                     "64", "--bandwidth_mb", "1", "--dtypes", "float32"],
    "grid_overlap": ["--steps", "8", "--sweep", "vocab"],
    "compile_waits": ["--costs", "results/estimates/fig16_mode_lr_x_vocab.txt",
                      "--rates=0.2060:20364.6,11.6588:2833.3", "--compile_threads", "2"],
    "triton_resources": ["--ir_only", "--kernels", "nap,ffn", "--shapes", "16:8", "--widths",
                         "16", "--dtypes", "float32"],
    "compile_threads": ["--grids", "2", "--rounds", "1", "--config", "demo",
                        "--config.model.d_model=8", "--config.model.num_layers=1"],
}
LAST_LINE = {"attention_scaling": "dnas_fused_over_softmax_fused_at_128=",
             "grid_throughput": "speedup_at_2=", "cpu_levers": "processes",
             "engine_compile": "chunk_speedup_test=", "suite_profile": "programs=",
             "machine_probe": "probe: median",
             "kernel_speed": "cases=2 of 2", "hlo_arrays": "nxn_arrays=0",
             "step_cost": "first_over_case_flops=", "grid_overlap": "all_speedup=",
             "engine_speed": "table5_grid models=",
             "compile_waits": "longest_first_over_one_ahead=",
             "compile_threads": "two_threads_speedup=",
             "triton_resources": "programs=9"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_benchmark_runs(name):
  if name == "cpu_levers" and len(os.sched_getaffinity(0)) != 2:
    pytest.skip("the run's --num_models=2 divides over two cores")
  run = subprocess.run([sys.executable, os.path.join("benchmarks", f"{name}.py"), *RUNS[name]],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, run.stderr[-3000:]
  assert LAST_LINE.get(name, "") in run.stdout.strip().splitlines()[-1], run.stdout[-2000:]


QUEUE = os.path.join(REPO, "results", "gpu_queue", "2026-11-27_h200")
QUEUE_LOGS = ("a_tests.txt", "a_tests_export_bf16_rerun.txt", "queue.txt")
# A number as a log or a table writes it, thousands' commas dropped: 1,685 -> 1685; 7.46x -> 7.46.
DIGITS = re.compile(r"\d+(?:[.,]\d+)*")


def numbers(text: str) -> set:
  return {n.replace(",", "") for n in DIGITS.findall(re.sub(r"`[^`]*`", " ", text))}


def test_the_gpu_queue_table_reads_its_logs():
  """Every number of BENCHMARKS.md's table of the queue's first loan is in the queue's committed
  files: the steps' output, or what ``benchmarks/queue_log.py`` read off it (``queue_log.txt``,
  which must be what the script prints from those logs now)."""
  with open(os.path.join(REPO, "BENCHMARKS.md")) as f:
    text = f.read()
  start = text.index("| step | ran | result |")
  table = text[start:text.index("\n\n", start)]
  in_logs = set()
  for name in os.listdir(QUEUE):
    with open(os.path.join(QUEUE, name)) as f:
      in_logs |= numbers(f.read())
  assert numbers(table) - in_logs == set()
  run = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "queue_log.py"),
                        *QUEUE_LOGS], cwd=QUEUE, capture_output=True, text=True, timeout=120)
  with open(os.path.join(QUEUE, "queue_log.txt")) as f:
    assert run.returncode == 0 and run.stdout == f.read(), run.stderr[-2000:]
  assert "1685 model-steps/s" in run.stdout.replace(",", "")
