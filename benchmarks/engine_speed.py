"""How much of the device the grid engine uses, measured side by side in one run (the GPU queue's
first step): the device's matmul peaks (bf16, and float32 at JAX's default precision: TF32 on an
NVIDIA GPU) and its memory bandwidth; model-steps/s of M models in one program and their share of
the bf16 peak at d = N = 32 and 128, float32 and bf16, before and after the step's cuts; one real
Table 5 grid's compile, evaluation and checkpoint seconds.

The step is the first-token case task's (``task.output`` "first", Figs. 5 and 6, Table 3), MTE,
L = 2, H = 4, batch 32, M models in one vmap scanned over ``--steps`` steps (the engine's
layout on an accelerator). Cuts:

  before      the last block over every token, the L2 term computed (its weight 0), Adam per tensor
  after       the last block on token 0 alone (a sweep's default), no L2 term
              (``train.drop_zero_l2``)
  flat_adam   after, and Adam's state one flat buffer (``train.flat_adam``; with --flat_adam)

GFLOP per model-step: XLA's cost analysis of the timed program (its loop bodies counted once:
one step of the M models) over M. One line per case:

  d=128 n=128 dtype=bfloat16 cuts=after model_steps_per_s=... gflop_per_model_step=...
  of_bf16_peak=...

then ``speedup d=... dtype=... after_over_before=...``, and for the Table 5 grid (the mode task at
N = 128, S = 2, MTE, 10 learning rates x 5 seeds, its chunk of 25 steps and evaluation):

  table5_grid models=50 compile_s=... ms_per_model_step=... evaluation_s=... checkpoint_s=...

  python benchmarks/engine_speed.py [--sizes small --sizes defaults] [--dtypes float32,bfloat16]
      [--models 50] [--steps 10] [--repeats 3] [--peak_sizes 2048,4096,8192] [--flat_adam] [--tiny]

``--tiny`` (the queue's dry run on a CPU): d = N = 8 and a Table 5 grid of 2 models at d = 8.
"""
from __future__ import annotations

import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
from absl import app, flags, logging

import grid_throughput  # its flags too: --sizes, --models, --steps, --repeats, --peak_sizes
from grid_throughput import build, matmul_peak_gflops, peak_precision, timed
from normattn_jax.configs import fig16_mode_lr_x_vocab
from normattn_jax.precision import DTYPES
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep import estimate
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.programs import Setup
from normattn_jax.train.checkpoint import GridCheckpoints

_DTYPES = flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
# grid_throughput's: --sizes small (d = N = 32) / defaults (128), --models (the largest is M),
# --steps, --repeats, --peak_sizes
SIZES = {"small": 32, "defaults": 128}
_BANDWIDTH_MB = flags.DEFINE_integer("bandwidth_mb", 2048, "Array size of the bandwidth copy.",
                                     lower_bound=1)
_FLAT = flags.DEFINE_boolean("flat_adam", False, "Also the flat Adam state (optional cuts).")
_TABLE5 = flags.DEFINE_boolean("table5", True, "Also one real Table 5 grid's seconds.")
_TINY = flags.DEFINE_boolean("tiny", False, "Tiny sizes: the queue's dry run on a CPU.")


class AllTokens(Setup):
  """A setup whose last block computes every token, as before the first-token path."""

  def model(self):
    return super().model().clone(all_tokens=True)


def setup_for(size: int, dtype: str, cuts: str) -> Setup:
  """The first-token case step of d = N = ``size`` in ``dtype`` with the cuts named."""
  c = config_lib.base_config()
  c.archs = ("mte",)
  c.model.d_model, c.task.seq_len, c.task.output, c.model.dtype = size, size, "first", dtype
  if _TINY.value:
    c.model.num_heads = 2
  c.train.flat_adam = cuts == "flat_adam"
  c.train.drop_zero_l2 = cuts != "before"
  if cuts == "before":
    return AllTokens("mte", c)
  return Setup("mte", c)


def bandwidth_gbs(megabytes: int, repeats: int = 5) -> float:
  """The best rate of an elementwise pass over a float32 array (read once, written once)."""
  x = jnp.ones((megabytes * 2 ** 20 // 4,), jnp.float32)
  f = jax.jit(lambda a: a * 2.0 + 1.0)
  f(x).block_until_ready()
  best = min(timed(lambda: f(x)) for _ in range(repeats))
  return 2 * x.size * 4 / best / 1e9


def bf16_peak_gflops(sizes) -> float:
  """The best rate of a bf16 matmul over a few sizes."""
  f = jax.jit(lambda a: a @ a)
  best = 0.0
  for size in sizes:
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.bfloat16)
    f(a).block_until_ready()
    for _ in range(3):
      best = max(best, 2 * size ** 3 / timed(lambda: f(a)) / 1e9)
  return best


def program_gflop(compiled, models: int) -> float:
  """GFLOP per model-step from XLA's cost analysis of a scanned program (bodies counted once)."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan"))) / models / 1e9


def throughput(size: int, dtype: str, cuts: str) -> tuple[float, float]:
  """(model-steps/s, GFLOP per model-step) of one variant."""
  start = time.perf_counter()
  models, steps = max(int(m) for m in grid_throughput._MODELS.value), grid_throughput._STEPS.value
  compiled, state, hp = build(setup_for(size, dtype, cuts), models, steps)
  gflop = program_gflop(compiled, models)
  print(f"  d={size} dtype={dtype} cuts={cuts}: built in {time.perf_counter() - start:.0f} s",
        flush=True)
  timed(lambda: compiled(state, hp))
  rates = [models * steps / timed(lambda: compiled(state, hp))
           for _ in range(grid_throughput._REPEATS.value)]
  return statistics.median(rates), gflop


def table5_setup() -> Setup:
  """Table 5's first grid (the mode task at N = 128, S = 2, MTE), its config as the sweep's."""
  c = fig16_mode_lr_x_vocab.get_config()
  c.archs, c.task.seq_len = ("mte",), 128
  if _TINY.value:
    c.learning_rates, c.num_seeds = (0.01,), 2
    c.model.d_model, c.model.num_heads, c.task.seq_len = 8, 2, 16
    c.eval.val_batches, c.eval.case_set_size = 1, 4
  config_lib.validate(c)
  plan = SweepPlan.of(c)
  grid = plan.grids[0]
  return Setup(grid.arch, plan.point_config(grid.point), plan.attention[grid.point]), plan


def table5_line() -> str:
  """One real Table 5 grid: compile, training, evaluation (its chunk's) and checkpoint seconds."""
  setup, plan = table5_setup()
  models = plan.axis.num_models
  cal, state = estimate.calibrated_grid(setup, models, setup.config.train.eval_every, 1)
  with tempfile.TemporaryDirectory() as folder:
    checkpoints = GridCheckpoints(folder)
    start = time.perf_counter()
    checkpoints.save(1, {"state": state, "metrics": {"val_acc": jnp.zeros((1, models))}})
    blocking_s = time.perf_counter() - start  # what the grid waits for (the save is async)
    checkpoints.wait()
    checkpoint_s = time.perf_counter() - start
    checkpoints.close()
  return (f"table5_grid models={cal.models} steps_per_chunk={cal.steps} "
          f"compile_s={cal.compile_s:.2f} ms_per_model_step={cal.step_s * 1e3:.4f} "
          f"evaluation_s={cal.evaluation_s:.3f} checkpoint_s={checkpoint_s:.3f} "
          f"checkpoint_blocking_s={blocking_s:.3f}")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # orbax's checkpoint chatter
  for dtype in _DTYPES.value:
    if dtype not in DTYPES:
      raise app.UsageError(f"--dtypes: {dtype!r} is not one of {tuple(DTYPES)}")
  sizes = [8] if _TINY.value else [SIZES[size] for size in grid_throughput._SIZES.value]
  peak_sizes = tuple(int(size) for size in grid_throughput._PEAK_SIZES.value)
  print(f"devices: {jax.devices()}", flush=True)
  bf16 = bf16_peak_gflops(peak_sizes)
  tf32 = matmul_peak_gflops(peak_sizes)
  print(f"matmul_peak_bf16_gflops={bf16:.0f} matmul_peak_float32_gflops={tf32:.0f} "
        f"({peak_precision()}) bandwidth_gbs={bandwidth_gbs(_BANDWIDTH_MB.value):.0f}",
        flush=True)
  variants = ("before", "after") + (("flat_adam",) if _FLAT.value else ())
  for size in sizes:
    for dtype in _DTYPES.value:
      rates = {}
      for cuts in variants:
        rate, gflop = throughput(size, dtype, cuts)
        rates[cuts] = rate
        print(f"d={size} n={size} dtype={dtype} cuts={cuts} model_steps_per_s={rate:.1f} "
              f"gflop_per_model_step={gflop:.4f} of_bf16_peak={rate * gflop / bf16:.2%}",
              flush=True)
      print(f"speedup d={size} dtype={dtype} after_over_before="
            f"{rates['after'] / rates['before']:.2f}", flush=True)
  if _TABLE5.value:
    print(table5_line(), flush=True)


if __name__ == "__main__":
  app.run(main)
