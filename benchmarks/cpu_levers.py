"""What XLA's CPU options and a process per core do to the engine's step at the NAP defaults.

Each lever is the engine's CPU default (MTE, L = 2, H = 4, batch 32, d = N = 128 or
``--d_model``; M models at one per vmap, sharded over one JAX device per core) run in a fresh
process with one change: an XLA flag (oneDNN's matmuls and fusions, XNNPACK, the
concurrency-optimised scheduler, matmuls on one thread each, ...) or the M models split over one
process per core (each pinned to its core with one device, timed from a shared start). YNNPACK's
fusions, fast math and a 512-bit vector width were measured before (BENCHMARKS.md). The levers
are interleaved round by round (a round runs every lever once, each in its own process); the
printed rate is the median over rounds of each process's median call, and the ratio is to the
default in the same run.

  python benchmarks/cpu_levers.py [--rounds 3] [--num_models 4] [--steps 4] [--repeats 3]
      [--levers default,onednn,...] [--d_model 128]

Measure on quiet cores: each lever's process uses every core.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

# The engine's programs, timer and flags (--repeats, --steps) are grid_throughput's.
import grid_throughput

_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds; each runs every lever once.", lower_bound=1)
_NUM_MODELS = flags.DEFINE_integer("num_models", 4, "Models M per lever.", lower_bound=1)
_D_MODEL = flags.DEFINE_integer("d_model", 128, "d = N of the MTE models (128: the NAP defaults).",
                                lower_bound=8)
_STEPS, _REPEATS = grid_throughput._STEPS, grid_throughput._REPEATS
_CHILD = flags.DEFINE_string("child", None, "Internal: time one process's share (a JSON spec).")

# name -> extra XLA flags; "processes" is the process-per-core lever
LEVERS = {
    "default": "",
    "onednn": "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_custom_call=true",
    "onednn_fusions": "--xla_cpu_experimental_onednn_fusion_type=dot,eltwise",
    "xnnpack": "--xla_cpu_use_xnnpack=true",
    "xnn_fusions": "--xla_cpu_experimental_xnn_fusion_type=dot,eltwise",
    "xnn_graph_greedy": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
    "concurrency_scheduler": "--xla_cpu_enable_concurrency_optimized_scheduler=true",
    "no_thunk_runtime": "--xla_cpu_use_thunk_runtime=false",
    "no_fusion_emitters": "--xla_cpu_use_fusion_emitters=false",
    "single_thread_eigen": "--xla_cpu_multi_thread_eigen=false",
    "processes": "",
}
_LEVERS = flags.DEFINE_list("levers", list(LEVERS), f"Levers, of {list(LEVERS)}.")


def child(spec: dict) -> None:
  """Build and time one process's models; print ``{"rate": model-steps/s}``."""
  grid_throughput.use_cpu_devices(spec["devices"])
  setup = grid_throughput.setup_for(spec["d_model"], spec["d_model"])
  compiled, state, hp = grid_throughput.build(setup, spec["models"], spec["steps"], 1,
                                              spec["devices"])
  run = lambda: compiled(state, hp)
  grid_throughput.timed(run)  # warm up
  barrier = spec.get("barrier")
  if barrier:  # start timing together with the other processes
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    while len(os.listdir(barrier)) < spec["parties"]:
      time.sleep(0.01)
  times = [grid_throughput.timed(run) for _ in range(spec["repeats"])]
  print(json.dumps({"rate": spec["models"] * spec["steps"] / statistics.median(times)}))


def launch(spec: dict, xla_flags: str, core=None) -> subprocess.Popen:
  env = dict(os.environ, XLA_FLAGS=" ".join([os.environ.get("XLA_FLAGS", ""), xla_flags]).strip(),
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
  command = [sys.executable, os.path.abspath(__file__), f"--child={json.dumps(spec)}"]
  if core is not None:
    command = ["taskset", "-c", str(core)] + command
  return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=os.path.dirname(os.path.abspath(__file__)))


def rate_of(processes) -> float:
  total = 0.0
  for process in processes:
    out, err = process.communicate()
    if process.returncode:
      raise RuntimeError(f"a lever's process failed (exit {process.returncode}):\n"
                         + "\n".join(err.strip().splitlines()[-5:]))
    total += json.loads(out.strip().splitlines()[-1])["rate"]
  return total


def measure_lever(name: str, cores: int) -> float:
  base = dict(steps=_STEPS.value, repeats=_REPEATS.value, d_model=_D_MODEL.value)
  if name != "processes":
    return rate_of([launch(dict(base, models=_NUM_MODELS.value, devices=cores), LEVERS[name])])
  with tempfile.TemporaryDirectory() as barrier:
    share = dict(base, models=_NUM_MODELS.value // cores, devices=1, barrier=barrier, parties=cores)
    return rate_of([launch(share, "", core) for core in range(cores)])


def main(argv):
  del argv
  if _CHILD.value:
    child(json.loads(_CHILD.value))
    return
  for name in _LEVERS.value:
    if name not in LEVERS:
      raise app.UsageError(f"--levers: {name!r} is none of {list(LEVERS)}")
  if "default" not in _LEVERS.value:
    raise app.UsageError("--levers must include 'default' (the reference)")
  cores = len(os.sched_getaffinity(0))
  if _NUM_MODELS.value % cores:
    raise app.UsageError(f"--num_models={_NUM_MODELS.value} must divide over the {cores} cores")
  samples = {name: [] for name in _LEVERS.value}
  for round_ in range(_ROUNDS.value):
    for name in _LEVERS.value:
      samples[name].append(measure_lever(name, cores))
      print(f"round {round_ + 1}: {name:>22} {samples[name][-1]:8.2f} model-steps/s", flush=True)
  reference = statistics.median(samples["default"])
  print(f"\nMTE, d = N = {_D_MODEL.value}, batch 32, {_NUM_MODELS.value} models, {cores} cores; "
        f"median of {_ROUNDS.value} rounds")
  print(f"{'lever':>22} {'model-steps/s':>14} {'/ default':>10}")
  for name, values in samples.items():
    rate = statistics.median(values)
    print(f"{name:>22} {rate:14.2f} {rate / reference:10.2f}")


if __name__ == "__main__":
  app.run(main)
