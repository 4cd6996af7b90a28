"""What a grid's chunk program costs to build: the models axis handed to the devices by
``shard_map`` (the engine's ``over_models``) against a vmap over a device axis (its earlier
form), side by side in one run.

For each size, M models (two per device) of one grid: the seconds to trace, lower and compile
the chunk program (the persistent compilation cache off, fresh functions each round, rounds
interleaved, medians), the compiled program's HLO instructions, the milliseconds per chunk, and
whether both programs give the same bits (states and metrics after two chunks).

  python benchmarks/engine_compile.py [--rounds 3] [--sizes test --sizes defaults]

The sizes: test (test_grid's tiny sweep: d = N = 8, one layer, batch 4, 10 steps per chunk) and
defaults (the NAP paper's: d = N = 128, L = 2, H = 4, batch 32; 4 steps per chunk and an
evaluation of 2 validation batches and 100 case sequences). The summary lines:
build_speedup_<size>=<vmap's trace + lower + compile seconds / shard_map's> and
chunk_speedup_<size>=<vmap's ms per chunk / shard_map's>.
"""
from __future__ import annotations

import os
import statistics
import time

import jax
import numpy as np
from absl import app, flags

from normattn_jax.sweep.config import base_config
from normattn_jax.train.grid import model_keys, models_sharding, over_models
from normattn_jax.sweep.programs import Setup, build_grid, make_programs
from normattn_jax.sweep.layout import ModelsAxis

_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds per variant.", lower_bound=1)
_CHUNKS = flags.DEFINE_integer("chunks", 3, "Timed chunks per round.", lower_bound=1)
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices", os.cpu_count() or 1, "Host devices a CPU is split into (one per core, as the "
    "runs do).", lower_bound=1)
_SIZES = flags.DEFINE_multi_enum("sizes", ["test", "defaults"], ["test", "defaults"],
                                 "Which sizes: test (d = N = 8), defaults (d = N = 128).")


def config_for(size: str, num_models: int):
  c = base_config()
  c.archs, c.num_seeds = ("mte",), 1
  c.learning_rates = tuple(1e-3 * 0.9 ** i for i in range(num_models))
  if size == "test":
    c.task.seq_len = 8
    c.model.update(d_model=8, num_heads=2, num_layers=1)
    c.train.update(num_steps=30, eval_every=10, batch_size=4)
    c.eval.update(val_batches=2, case_set_size=4)
  else:
    c.train.update(num_steps=12, eval_every=4)
    c.eval.update(val_batches=2, case_set_size=100)
  return c


def vmapped_over_devices(fn, per_vmap: int, devices: int):
  """The engine's earlier ``over_models``: a vmap over a device axis of each device's
  ``lax.map`` over vmaps of ``per_vmap`` models, left to the partitioner to split."""
  def run(x, per_model, *shared):
    split = lambda a: a.reshape((devices, -1) + a.shape[1:])
    merge = lambda a: a.reshape((-1,) + a.shape[2:])
    per_device = lambda x, m: jax.lax.map(lambda b: fn(*b, *shared), (x, m),
                                          batch_size=per_vmap)
    return jax.tree.map(merge, jax.vmap(per_device)(*jax.tree.map(split, (x, per_model))))
  return run


VARIANTS = {
    "shard_map": lambda fn, per_vmap: over_models(fn, per_vmap),
    "vmap": lambda fn, per_vmap: vmapped_over_devices(fn, per_vmap, jax.device_count()),
}


def _since(start: float) -> float:
  return time.perf_counter() - start


def timed_build(variant: str, setup: Setup, args) -> tuple[dict, object]:
  """Seconds to trace, lower and compile ``variant``'s chunk program, and the compiled one."""
  program = jax.jit(VARIANTS[variant](make_programs(setup).chunk, 1),
                    out_shardings=models_sharding())
  start = time.perf_counter()
  traced = program.trace(*args)
  trace = _since(start)
  start = time.perf_counter()
  lowered = traced.lower()
  lower = _since(start)
  start = time.perf_counter()
  compiled = lowered.compile()
  return {"trace": trace, "lower": lower, "compile": _since(start)}, compiled


def hlo_instructions(compiled) -> int:
  return sum(1 for line in compiled.as_text().splitlines() if " = " in line)


def chunk_ms(compiled, state, hp, shared, chunks: int) -> float:
  jax.block_until_ready(compiled(state, hp, *shared))  # warm
  start = time.perf_counter()
  for _ in range(chunks):
    state, metrics = compiled(state, hp, *shared)
  jax.block_until_ready((state, metrics))
  return 1000 * _since(start) / chunks


def measure(size: str, rounds: int, chunks: int) -> dict:
  num_models = 2 * jax.device_count()
  c = config_for(size, num_models)
  setup = Setup("mte", c)
  grid = build_grid(setup, num_models, ahead=False)  # its programs: compiled below, timed
  axis = ModelsAxis.of(c)
  hp = grid.shard(axis.hyperparameters())
  state = grid.init(grid.shard(model_keys(c.seed, axis.seed_indices())), hp, *grid.shared)
  args = (state, hp, *grid.shared)
  rows = {name: {"trace": [], "lower": [], "compile": [], "ms": []} for name in VARIANTS}
  hlo, last = {}, {}
  for _ in range(rounds):
    for name in VARIANTS:
      times, compiled = timed_build(name, setup, args)
      for key, value in times.items():
        rows[name][key].append(value)
      rows[name]["ms"].append(chunk_ms(compiled, state, hp, grid.shared, chunks))
      hlo[name] = hlo_instructions(compiled)
      print(f"{size}, {name}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rows[name].items()),
            flush=True)
      last[name] = compiled
  outputs = {}
  for name, compiled in last.items():  # two chunks of each, once
    after_one, _ = compiled(state, hp, *grid.shared)
    outputs[name] = jax.tree.map(np.asarray, compiled(after_one, hp, *grid.shared))
  same = jax.tree.all(jax.tree.map(np.array_equal, outputs["shard_map"], outputs["vmap"]))
  return {"models": num_models, "same_bits": bool(same),
          **{name: dict({key: statistics.median(v) for key, v in row.items()}, hlo=hlo[name])
             for name, row in rows.items()}}


def main(argv):
  del argv
  jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value)
  jax.config.update("jax_enable_compilation_cache", False)
  print(f"devices: {jax.devices()}")
  summary = []
  for size in _SIZES.value:
    result = measure(size, _ROUNDS.value, _CHUNKS.value)
    print(f"\n{size}: M = {result['models']}, same bits: {result['same_bits']}")
    print("| variant | trace s | lower s | compile s | HLO instructions | ms/chunk |")
    print("|---|---|---|---|---|---|")
    for name in VARIANTS:
      r = result[name]
      print(f"| {name} | {r['trace']:.2f} | {r['lower']:.2f} | {r['compile']:.2f} | {r['hlo']} "
            f"| {r['ms']:.1f} |")
    build_s = {name: sum(result[name][k] for k in ("trace", "lower", "compile"))
               for name in VARIANTS}
    summary.append(f"build_speedup_{size}={build_s['vmap'] / build_s['shard_map']:.2f}")
    summary.append(f"chunk_speedup_{size}={result['vmap']['ms'] / result['shard_map']['ms']:.2f}")
  print()
  print("\n".join(summary))


if __name__ == "__main__":
  app.run(main)
