"""Grid-engine throughput: M models in one compiled program vs the same models one after another.

Measured side by side in one run (variants interleaved, medians of repeats): model-steps/s and
achieved GFLOP/s against a matmul peak measured in the same run (float32 inputs at JAX's matmul
precision, named as it prints: TF32 on a recent NVIDIA GPU, fp32 on a CPU), for M = 1, 10, 50 at
d = 32 (N = 32) and at the NAP paper's defaults (d = N = 128, L = 2, H = 4, batch 32). One program
holds the M models either as one vmap (width M, the engine's default on an accelerator) or as a
lax.map over 1-model vmaps (width 1, its default on a CPU), both also sharded over the CPU
split into one host device per core (``--cpu_devices``; a run script's ``--cpu_devices``): width
1 and one vmap per device.
FLOPs come from XLA's cost analysis of the compiled step. The architecture is MTE.

  python benchmarks/grid_throughput.py [--repeats 3] [--steps 4] [--models 1,10,50]
      [--sizes small --sizes defaults]

The summary lines: speedup_at_50=<one program (its best variant) / one after another, d = 32>
and peak_fraction_at_defaults=<model FLOP/s / matmul peak, best variant>.
"""
from __future__ import annotations

import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from normattn_jax.sweep.config import base_config
from normattn_jax.sweep.programs import Setup, make_programs
from normattn_jax.train.grid import over_models

_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per variant.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 4, "training steps per timed call", lower_bound=1)
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices", os.cpu_count() or 1, "Host devices a CPU is split into (one per core by "
    "default); the variants 'N devices' shard the models over them.", lower_bound=1)
_SIZES = flags.DEFINE_multi_enum("sizes", ["small", "defaults"], ["small", "defaults"],
                                 "Which model sizes: small (d = N = 32), defaults (d = N = 128).")
_PEAK_SIZES = flags.DEFINE_list("peak_sizes", ["1024", "2048", "4096"],
                                "Square matmul sizes whose best rate is the peak (smaller in "
                                "the GPU queue's dry run on a CPU).")
_MODELS = flags.DEFINE_list("models", ["1", "10", "50"], "Model counts M; the largest gives "
                            "the speedup line.")


def use_cpu_devices(count: int) -> None:
  """Split a CPU into ``count`` host devices (before JAX starts; no effect on accelerators)."""
  jax.config.update("jax_num_cpu_devices", count)


def peak_precision() -> str:
  """What a float32 matmul runs in at JAX's matmul precision, so what the peak is a peak of:
  "TF32" on an NVIDIA GPU of compute capability 8.0 or above at the default precision (its
  tensor cores), "bf16" on a TPU at the default (one bfloat16 pass), "fp32" on a CPU or at
  "highest"."""
  setting = str(jax.config.jax_default_matmul_precision or "default").lower()
  if setting in ("highest", "float32"):
    return "fp32"
  if setting == "bfloat16":
    return "bf16"
  backend = jax.default_backend()
  if backend == "gpu" and (setting == "tensorfloat32" or float(
      getattr(jax.devices()[0], "compute_capability", "0") or 0) >= 8):
    return "TF32"
  if backend == "tpu":
    return "bf16" if setting in ("default", "fastest", "bfloat16") else "bf16_3x"
  return "fp32"


def matmul_peak_gflops(sizes=(1024, 2048, 4096), repeats=3) -> float:
  """The best rate of a float32 matmul at JAX's matmul precision over a few sizes: the machine's
  practical peak in ``peak_precision()``."""
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


def initial(programs, num_models):
  """The models' initial states (seeds 0 .. M - 1) and hyper-parameters, stacked."""
  keys = np.stack([np.asarray(jax.random.key_data(jax.random.key(i))) for i in range(num_models)])
  hp = {"learning_rate": jnp.full((num_models,), 1e-3), "l2": jnp.zeros((num_models,)),
        "dropout": jnp.zeros((num_models,))}
  return jax.jit(jax.vmap(programs.init))(keys, hp), hp


def flops_per_model_step(setup) -> float:
  """XLA's count of one model's training step. XLA counts a loop body once, so it comes from a
  program of one unrolled step (on one device: a sharded program's cost analysis counts one
  device's share)."""
  programs = make_programs(setup)
  state, hp = initial(programs, 1)
  one_step = jax.jit(jax.vmap(lambda s, h: programs.train_step(s, h)[0])).lower(state, hp)
  cost = one_step.compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost["flops"])


def build(setup, num_models, steps, per_vmap=None, devices=1):
  """A jitted program running ``steps`` training steps of ``num_models`` models, ``per_vmap``
  of them vmapped together (default: all), the models split over the first ``devices`` devices
  (each device runs its share as a lax.map over the vmaps, as the engine does)."""
  programs = make_programs(setup)

  def run(state, hp):
    return jax.lax.scan(lambda s, _: programs.train_step(s, hp), state, None, length=steps)[0]

  mesh = Mesh(np.asarray(jax.devices()[:devices]), ("models",))
  sharding = NamedSharding(mesh, P("models"))
  state, hp = jax.device_put(initial(programs, num_models), sharding)
  program = over_models(run, per_vmap or num_models // devices, mesh)
  compiled = jax.jit(program, out_shardings=sharding).lower(state, hp).compile()
  return compiled, state, hp


def timed(fn):
  start = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - start


def engine_configurations(model_counts, cpu_devices):
  """(M, width, devices) of each one-program variant: one vmap of all M, a lax.map over 1-model
  vmaps, and, where M divides over ``cpu_devices`` host devices (one per core), those split
  over them and one vmap per device."""
  found = []
  for m in model_counts:
    if m > 1:
      found += [(m, m, 1), (m, 1, 1)]
      if cpu_devices > 1 and m % cpu_devices == 0:
        found.append((m, 1, cpu_devices))
        if m > cpu_devices:
          found.append((m, m // cpu_devices, cpu_devices))
  return found


def variant_name(m, width, devices):
  return f"one program, M={m}, width {width}" + (f", {devices} devices" if devices > 1 else "")


def measure(d_model, seq_len, model_counts, steps, repeats, peak):
  setup = setup_for(d_model, seq_len)
  start = time.perf_counter()  # each build's time, as it ends: a run cut short says where it was
  flops = flops_per_model_step(setup)
  single, s1, hp1 = build(setup, 1, steps)
  print(f"d={d_model}: the cost analysis and the one-model program built in "
        f"{time.perf_counter() - start:.0f} s", flush=True)
  variants = {}
  for m, w, k in engine_configurations(model_counts, jax.device_count()):
    name, start = variant_name(m, w, k), time.perf_counter()
    compiled, state, hp = build(setup, m, steps, w, k)
    variants[name] = (m, lambda c=compiled, s=state, h=hp: c(s, h))
    print(f"  {name} built in {time.perf_counter() - start:.0f} s", flush=True)
  for m in model_counts:
    variants[f"one after another, M={m}"] = (
        m, lambda m=m: [single(s1, hp1) for _ in range(m)])
  for _, fn in variants.values():  # warm up
    timed(fn)
  samples = {name: [] for name in variants}
  for _ in range(repeats):
    for name, (m, fn) in variants.items():
      samples[name].append(m * steps / timed(fn))
  print(f"\nd={d_model}, N={seq_len}: {flops / 1e9:.2f} GFLOP per model-step "
        f"(XLA cost analysis); matmul peak {peak:.0f} GFLOP/s ({peak_precision()})")
  print(f"{'variant':>38} {'model-steps/s':>14} {'GFLOP/s':>9} {'of peak':>8}")
  rates = {}
  for name, values in samples.items():
    rate = statistics.median(values)
    rates[name] = rate
    print(f"{name:>38} {rate:14.1f} {rate * flops / 1e9:9.1f} {rate * flops / 1e9 / peak:8.1%}")
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
  use_cpu_devices(_CPU_DEVICES.value)
  print(f"devices: {jax.devices()}")
  try:
    peak_sizes = tuple(int(size) for size in _PEAK_SIZES.value)
  except ValueError:
    raise app.UsageError(f"--peak_sizes takes comma-separated integers, "
                         f"got {','.join(_PEAK_SIZES.value)}") from None
  peak = matmul_peak_gflops(peak_sizes)
  largest = max(counts)
  if "small" in _SIZES.value:
    small, _ = measure(32, 32, counts, _STEPS.value, _REPEATS.value, peak)
    program = max(rate for name, rate in small.items()
                  if name.startswith(f"one program, M={largest},"))
    print(f"speedup_at_{largest}={program / small[f'one after another, M={largest}']:.2f}")
  if "defaults" in _SIZES.value:
    paper, flops = measure(128, 128, counts, _STEPS.value, _REPEATS.value, peak)
    best = max(rate for name, rate in paper.items() if name.startswith("one program")
               or name == "one after another, M=1")
    print(f"\npeak_fraction_at_defaults={best * flops / 1e9 / peak:.3f}")


if __name__ == "__main__":
  app.run(main)
