"""What one model's training step costs, from XLA's cost analysis of the compiled step: FLOPs,
bytes accessed and kernels, on any machine (no timing, so the figures are the program's, not the
machine's load; compiled without LLVM's passes, which come after the HLO the analysis reads,
``cli.command.COST_ANALYSIS_FLAGS``).

For each architecture, d = N, task head and compute dtype: the grid engine's training step of
one model (``make_programs``: data drawn on the device, forward, backward, Adam), compiled for
the machine at hand, one step unrolled (XLA counts a loop's body once). The heads are the case
task's: ``case`` its all-token output, ``first`` its first-token output (``task.output``
"first"). One line per case:

  arch=mte task=first d=32 n=32 dtype=float32 gflop_per_model_step=... mb_per_model_step=...
  kernels_per_step=...

``mb_per_model_step`` is XLA's "bytes accessed" (every operand and result of every top-level
operation: what a memory-bound step moves), ``kernels_per_step`` the operations the compiled
step launches (``kernels``: fusions, matmuls, custom calls, copies; loops' bodies once). The
last line, first_over_case_flops=<the largest ratio over the cases>, is the first-token step's
FLOPs over the case step's at the same arch, size and dtype.

  python benchmarks/step_cost.py [--archs mte,nap] [--sizes 32,128]
      [--dtypes float32,bfloat16] [--batch_size 32] [--evaluation] [--cuts]

``--cuts`` adds to each line the same step with the L2 term left out where every model's weight
is 0 (``gflop_drop_zero_l2=... mb_drop_zero_l2=... kernels_drop_zero_l2=...``,
``train.drop_zero_l2``) and with Adam's state one flat buffer besides (``..._flat_adam=...``,
``train.flat_adam``).

``--evaluation`` adds, per arch and size (float32, the case task's all-token head, the sweep's
defaults: an evaluation every 100 steps of 32 validation batches and 1000 sequences per case),
the GFLOP of one interval's training steps and of its evaluation's parts:

  arch=mte d=128 n=128 train_gflop=... val_gflop=... case_sets_gflop=...
  validation_case_sets_gflop=...
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from absl import app, flags

from normattn_jax.cli import command as cli
from normattn_jax.precision import DTYPES
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep import estimate
from normattn_jax.sweep.programs import Setup

_ARCHS = flags.DEFINE_list("archs", ["mte", "nap"], "Architectures (blocks.ARCHITECTURES).")
_SIZES = flags.DEFINE_list("sizes", ["32", "128"], "d = N values.")
_DTYPES = flags.DEFINE_list("dtypes", list(DTYPES), f"Compute dtypes, from {tuple(DTYPES)}.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Sequences per step.", lower_bound=1)
_EVALUATION = flags.DEFINE_boolean("evaluation", False, "Also the GFLOP of an evaluation's "
                                   "parts beside its interval's training.")
_CUTS = flags.DEFINE_boolean("cuts", False, "Also each step with its exact cuts: the L2 "
                             "term left out, and Adam's state flat besides.")

# The case task's heads: the name printed -> task.output.
HEADS = {"case": "tokens", "first": "first"}


def step_config(arch: str, size: int, output: str, dtype: str, batch_size: int):
  """The case-task sweep config of one step: d = N = ``size``, the given head and dtype."""
  c = config_lib.base_config()
  c.archs = (arch,)
  c.model.d_model, c.task.seq_len, c.task.output = size, size, output
  c.model.dtype, c.train.batch_size = dtype, batch_size
  config_lib.validate(c)
  return c


# The step's exact cuts, each as (L2 term left out where every model's weight is 0, flat Adam):
# as a sweep builds it by default (neither: both are opt-in, ``train.drop_zero_l2`` and
# ``train.flat_adam``), with the L2 term left out, and with Adam's state one flat buffer too.
CUTS = {"default": (False, False), "drop_zero_l2": (True, False), "flat_adam": (True, True)}


def with_cuts(config, cuts: str):
  """``config`` with the cuts ``CUTS[cuts]``."""
  drop, flat = CUTS[cuts]
  c = ml_collections.ConfigDict(config.to_dict())
  c.train.drop_zero_l2, c.train.flat_adam = drop, flat
  return c


def step_cost(arch: str, size: int, head: str, dtype: str, batch_size: int,
              cuts: str = "default") -> dict:
  """XLA's figures of one model's compiled training step (``estimate.step_cost``), built with
  the cuts ``CUTS[cuts]``.

  Returns:
    ``{"gflop", "mb", "kernels"}`` per model-step.
  """
  c = with_cuts(step_config(arch, size, HEADS[head], dtype, batch_size), cuts)
  cost = estimate.step_cost(Setup(arch, c))
  return {"gflop": cost.gflop, "mb": cost.mb, "kernels": cost.kernels}


def forward_gflop(setup: Setup, batch: int, length: int) -> float:
  """XLA's GFLOP of one forward pass of ``batch`` sequences of ``length`` tokens."""
  model = setup.model()
  tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.key(0), tokens)
  cost = jax.jit(model.apply).lower(params, tokens).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost["flops"]) / 1e9


def evaluation_line(arch: str, size: int, batch_size: int) -> str:
  """One evaluation interval's training and evaluation GFLOP at the sweep's defaults."""
  c = step_config(arch, size, "tokens", "float32", batch_size)
  setup = Setup(arch, c)
  train = step_cost(arch, size, "case", "float32", batch_size)["gflop"] * c.train.eval_every
  chunk = 250  # grid.eval_sets_for's sets go through the model 250 sequences at a time
  per_set = len(setup.task.grouped_eval.groups) * c.eval.case_set_size / chunk
  val = c.eval.val_batches * forward_gflop(setup, batch_size, setup.val_len)
  at_n = per_set * forward_gflop(setup, chunk, size)
  at_validation = per_set * forward_gflop(setup, chunk, setup.val_len)
  return (f"arch={arch} d={size} n={size} train_gflop={train:.1f} val_gflop={val:.1f} "
          f"case_sets_gflop={at_n:.1f} validation_case_sets_gflop={at_validation:.1f}")


def line(arch, head, size, dtype, cost, others=None) -> str:
  """One case as the benchmark prints it (``others``: {cuts: cost} of the step built with
  other cuts, ``CUTS``)."""
  text = (f"arch={arch} task={head} d={size} n={size} dtype={dtype} "
          f"gflop_per_model_step={cost['gflop']:.4f} mb_per_model_step={cost['mb']:.2f} "
          f"kernels_per_step={cost['kernels']}")
  for cuts, other in (others or {}).items():
    text += (f" gflop_{cuts}={other['gflop']:.4f} mb_{cuts}={other['mb']:.2f} "
             f"kernels_{cuts}={other['kernels']}")
  return text


def main(argv):
  del argv
  cli.quick_compile(xla_flags=cli.COST_ANALYSIS_FLAGS)
  try:
    sizes = [int(size) for size in _SIZES.value]
  except ValueError:
    raise app.UsageError(f"--sizes takes comma-separated integers, got "
                         f"{','.join(_SIZES.value)}") from None
  for dtype in _DTYPES.value:
    if dtype not in DTYPES:
      raise app.UsageError(f"--dtypes: {dtype!r} is not one of {tuple(DTYPES)}")
  ratios = []
  for arch in _ARCHS.value:
    for size in sizes:
      for dtype in _DTYPES.value:
        costs = {head: step_cost(arch, size, head, dtype, _BATCH.value) for head in HEADS}
        for head, cost in costs.items():
          others = {cuts: step_cost(arch, size, head, dtype, _BATCH.value, cuts)
                    for cuts in CUTS if cuts != "default" and _CUTS.value}
          print(line(arch, head, size, dtype, cost, others), flush=True)
        ratios.append(costs["first"]["gflop"] / costs["case"]["gflop"])
      if _EVALUATION.value:
        print(evaluation_line(arch, size, _BATCH.value), flush=True)
  print(f"first_over_case_flops={max(ratios):.3f}")


if __name__ == "__main__":
  app.run(main)
