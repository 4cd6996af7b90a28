"""Grid-engine throughput: M models in one compiled program vs the same models one after another.

Measured side by side in one run (variants interleaved, medians of repeats): model-steps/s and
achieved GFLOP/s against a matmul peak measured in the same run, for M = 1, 10, 50 at d = 32
(N = 32) and at the NAP paper's defaults (d = N = 128, L = 2, H = 4, batch 32). One program
holds the M models either as one vmap (width M, the engine's default on an accelerator) or as a
lax.map over 1-model vmaps (width 1, its default on a CPU). FLOPs come from XLA's cost analysis
of the compiled step. The architecture is MTE.

  python benchmarks/grid_throughput.py [--repeats 3] [--steps 4] [--models 1,10,50]

The last two lines: peak_fraction_at_defaults=<model FLOP/s / matmul peak, best M>
and speedup_at_50=<one program (its better width) / one after another, d = 32>.
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from normattn_jax.train.config import base_config
from normattn_jax.train.grid import Setup, make_programs, over_models

_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per variant.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 4, "training steps per timed call", lower_bound=1)
_MODELS = flags.DEFINE_list("models", ["1", "10", "50"], "Model counts M; the largest gives "
                            "the speedup line.")


def matmul_peak_gflops(sizes=(1024, 2048, 4096), repeats=3) -> float:
  """The best fp32 matmul rate over a few sizes: the machine's practical peak."""
  f = jax.jit(lambda x: x @ x)
  best = 0.0
  for size in sizes:
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    f(a).block_until_ready()
    for _ in range(repeats):
      start = time.perf_counter()
      f(a).block_until_ready()
      best = max(best, 2 * size ** 3 / (time.perf_counter() - start) / 1e9)
  return best


def setup_for(d_model, seq_len):
  c = base_config()
  c.model.d_model, c.task.seq_len = d_model, seq_len
  return Setup("mte", c)


def build(setup, num_models, steps, per_vmap=None):
  """A jitted program running ``steps`` training steps of ``num_models`` models, ``per_vmap``
  of them vmapped together (default: all)."""
  programs = make_programs(setup)

  def run(state, hp):
    return jax.lax.scan(lambda s, _: programs.train_step(s, hp), state, None, length=steps)[0]

  keys = np.stack([np.asarray(jax.random.key_data(jax.random.key(i))) for i in range(num_models)])
  hp = {"learning_rate": jnp.full((num_models,), 1e-3), "l2": jnp.zeros((num_models,))}
  state = jax.jit(jax.vmap(programs.init))(keys, hp)
  compiled = jax.jit(over_models(run, per_vmap or num_models)).lower(state, hp).compile()
  # XLA counts a loop body once, so the FLOPs come from a program of one unrolled step
  one_step = jax.jit(jax.vmap(lambda s, h: programs.train_step(s, h)[0])).lower(state, hp)
  cost = one_step.compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return compiled, state, hp, float(cost["flops"]) / num_models


def timed(fn):
  start = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - start


def measure(d_model, seq_len, model_counts, steps, repeats, peak):
  setup = setup_for(d_model, seq_len)
  single, s1, hp1, flops = build(setup, 1, steps)
  programs = {(m, w): build(setup, m, steps, w) for m in model_counts if m > 1 for w in (m, 1)}
  variants = {}
  for m in model_counts:
    for w in (m, 1) if m > 1 else ():
      compiled, state, hp, _ = programs[m, w]
      variants[f"one program, M={m}, width {w}"] = (m, lambda c=compiled, s=state, h=hp: c(s, h))
    variants[f"one after another, M={m}"] = (
        m, lambda m=m: [single(s1, hp1) for _ in range(m)])
  for _, fn in variants.values():  # warm up
    timed(fn)
  samples = {name: [] for name in variants}
  for _ in range(repeats):
    for name, (m, fn) in variants.items():
      samples[name].append(m * steps / timed(fn))
  print(f"\nd={d_model}, N={seq_len}: {flops / 1e9:.2f} GFLOP per model-step "
        f"(XLA cost analysis); matmul peak {peak:.0f} GFLOP/s")
  print(f"{'variant':>28} {'model-steps/s':>14} {'GFLOP/s':>9} {'of peak':>8}")
  rates = {}
  for name, values in samples.items():
    rate = statistics.median(values)
    rates[name] = rate
    print(f"{name:>28} {rate:14.1f} {rate * flops / 1e9:9.1f} {rate * flops / 1e9 / peak:8.1%}")
  return rates, flops


def main(argv):
  del argv
  try:
    counts = [int(m) for m in _MODELS.value]
  except ValueError:
    raise app.UsageError(f"--models takes comma-separated integers, "
                         f"got {','.join(_MODELS.value)}") from None
  if not counts or min(counts) < 1 or max(counts) < 2:
    raise app.UsageError(f"--models needs counts >= 1, one of them above 1 (for the speedup), "
                         f"got {','.join(_MODELS.value)}")
  print(f"devices: {jax.devices()}")
  peak = matmul_peak_gflops()
  small, _ = measure(32, 32, counts, _STEPS.value, _REPEATS.value, peak)
  paper, flops = measure(128, 128, counts, _STEPS.value, _REPEATS.value, peak)
  largest = max(counts)
  best = max(rate for name, rate in paper.items() if name.startswith("one program")
             or name == "one after another, M=1")
  print(f"\npeak_fraction_at_defaults={best * flops / 1e9 / peak:.3f}")
  program = max(small[f"one program, M={largest}, width {w}"] for w in (largest, 1))
  print(f"speedup_at_{largest}={program / small[f'one after another, M={largest}']:.2f}")


if __name__ == "__main__":
  app.run(main)
