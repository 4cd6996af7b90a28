"""How long a sweep's devices wait for compiles under each schedule of its grids, projected from
an earlier ``normattn-sweep --estimate`` output (its grids' steps, model-steps and FLOPs), rates
measured on the device (``--rates``, as ``--estimate_rates``) and one grid's compile seconds
(``--compile_s``, e.g. the GPU queue's ``table5_grid`` line): nothing is compiled or timed here.
The schedules, each ``estimate.compile_waits`` of the grids' training seconds:

- in_turn: each grid compiled when the one before has trained (``BUILT_AHEAD`` 0);
- one_ahead: the next grid compiled while one trains, the grids in the plan's order;
- longest_first: the grids of the most FLOPs first, every later one compiled while they train
  (the engine's: ``SweepPlan.training_order`` orders them by their work, ``BUILT_AHEAD`` None),
  ``--compile_threads`` at once (the engine's: one on a CPU, two beside an accelerator).

A compile and a training are taken not to slow each other (the host compiles while the
accelerator trains), so on a CPU, whose cores do both, this is not what a sweep sees.

  python benchmarks/compile_waits.py --costs results/estimates/fig16_mode_lr_x_vocab.txt \
      --rates=0.2060:20364.6,11.6588:2833.3 --compile_s 28 --compile_s 60 [--rate_scale 3]
      [--compile_threads 1 --compile_threads 2]

One line per compile time, rate scale and thread count: the training hours and each schedule's
seconds waited, then ``longest_first_over_one_ahead=`` for the first.
"""
from __future__ import annotations

import itertools

from absl import app, flags

from normattn_jax.sweep import estimate

_COSTS = flags.DEFINE_string("costs", None, "An earlier --estimate's output.", required=True)
_RATES = flags.DEFINE_list("rates", None, "<GFLOP per model-step>:<model-steps/s> pairs.",
                           required=True)
_COMPILE_S = flags.DEFINE_multi_float("compile_s", [28.0], "One grid's compile seconds.",
                                      lower_bound=0)
_THREADS = flags.DEFINE_multi_integer("compile_threads", [1], "Grids compiled at once in the "
                                      "longest-first schedule.", lower_bound=1)
_RATE_SCALE = flags.DEFINE_multi_float("rate_scale", [1.0], "The rates times this (e.g. 3: "
                                       "a goal of three times the measured rates), > 0.")


def schedules(rows, rates, compile_s: float, threads: int = 1) -> dict:
  """Seconds waited for compiles per schedule (the module's docstring), and the training's, of
  the grids ``estimate.read_grids`` read."""
  seconds = [(model_steps * gflop, model_steps / estimate.rate_at(rates, gflop))
             for _, model_steps, gflop in rows]
  plan = [(compile_s, train_s) for _, train_s in seconds]
  longest = [(compile_s, train_s) for _, train_s in sorted(seconds, key=lambda r: -r[0])]
  return {"train_s": sum(train_s for _, train_s in seconds),
          "in_turn": estimate.compile_waits(plan, ahead=0),
          "one_ahead": estimate.compile_waits(plan, ahead=1),
          "longest_first": estimate.compile_waits(longest, threads=threads)}


def main(argv):
  del argv
  try:
    rates = [tuple(float(part) for part in value.split(":", 1)) for value in _RATES.value]
    estimate.rate_at(rates, 1.0)
  except ValueError as err:
    raise app.UsageError(f"--rates: {err}") from None
  if any(not scale > 0 for scale in _RATE_SCALE.value):
    raise app.UsageError(f"--rate_scale must be > 0, got {_RATE_SCALE.value}")
  with open(_COSTS.value) as f:
    try:
      rows = estimate.read_grids(f.read().splitlines())
    except ValueError as err:
      raise app.UsageError(f"--costs={_COSTS.value}: {err}") from None
  ratio = None
  for compile_s, scale, threads in itertools.product(_COMPILE_S.value, _RATE_SCALE.value,
                                                     _THREADS.value):
    waits = schedules(rows, [(g, r * scale) for g, r in rates], compile_s, threads)
    if ratio is None:
      ratio = waits["longest_first"] / max(waits["one_ahead"], 1e-9)
    print(f"grids={len(rows)} compile_s={compile_s:g} rate_scale={scale:g} "
          f"compile_threads={threads} train_h={waits['train_s'] / 3600:.3f} "
          f"in_turn_waited_s={waits['in_turn']:.0f} one_ahead_waited_s={waits['one_ahead']:.0f} "
          f"longest_first_waited_s={waits['longest_first']:.0f}", flush=True)
  print(f"longest_first_over_one_ahead={ratio:.3f}")


if __name__ == "__main__":
  app.run(main)
