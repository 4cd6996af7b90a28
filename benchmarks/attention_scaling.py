"""Quadratic vs fast vs fused attention for every normalisation, side by side in one run.

For N = 128 .. 8192 (batch 1, 8 heads, d_h = 64): the time (median of repeats, variants
interleaved) and the peak scratch memory (XLA's compiled memory analysis: temporaries plus
outputs) of the forward pass and of forward + backward, for the quadratic path (weight matrix,
``weights.py``), the fast path (``fast.py``) of every normalisation that has one (by default) and
its fused path (``fused.py``, ``jax.nn.dot_product_attention``: XLA's kernel on a CPU, cuDNN's on
a GPU in bf16/fp16) where it has one ("-" otherwise), measured by ``normattn_jax.analysis.cost``.
"speedup" is quadratic / fast time, "fused x" quadratic / fused time. Plain softmax attention
(quadratic) is the time reference of every fast path (the "fast/softmax" column). A variant whose
scratch memory exceeds --max_gib is compiled (for its memory) but not run.

  python benchmarks/attention_scaling.py [--max_n 8192] [--repeats 3] [--time_max_n 4096]
      [--batch 1] [--dtype float32|bfloat16]

On a GPU, ``--dtype bfloat16 --batch 8`` gives cuDNN's kernel calls long enough to time.
After each N where both were timed: dnas_fused_over_softmax_fused_at_<N>=<fused DNAS / fused
softmax time, forward+backward>; the last lines: nap_speedup_at_4096=<quadratic / fast,
forward+backward> and dnas_memory_ratio_at_4096=<quadratic / fast peak memory, forward+backward>.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from absl import app, flags

from normattn_jax.analysis import cost
from normattn_jax.attention import registry

_MAX_N = flags.DEFINE_integer("max_n", 8192, "Longest sequence length N (of 128 .. 8192).",
                              lower_bound=128)
_MIN_N = flags.DEFINE_integer("min_n", 128, "Shortest sequence length N (the GPU queue's "
                              "fused-DNAS step starts at 512, where the goal applies).",
                              lower_bound=128)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per variant.", lower_bound=1)
_MAX_GIB = flags.DEFINE_float("max_gib", 6.0, "Scratch memory limit (GiB) of a variant that runs.")
_TIME_MAX_N = flags.DEFINE_integer("time_max_n", 8192, "longer sequences get their memory "
                                   "measured, not their time")
_BATCH = flags.DEFINE_integer("batch", 1, "Batch size.", lower_bound=1)
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                           "dtype of q, k and v (cuDNN's fused kernel takes bf16 and fp16).")
_NORMALIZATIONS = flags.DEFINE_list(
    "normalizations", [name for name in registry.names() if registry.get(name).fast is not None],
    "Normalisations to measure (each needs a fast path).")


def _ms(seconds) -> str:
  return f"{seconds * 1e3:9.2f}" if seconds is not None else f"{'(skip)':>9}"


def _ratio(a, b, width: int) -> str:
  return f"{a / b:{width}.2f}" if a and b else f"{'-':>{width}}"


def _fused_cells(quadratic_s, fused_s, fused_bytes) -> str:
  """The fused columns: time, quadratic / fused time, memory ("-" without a fused path)."""
  if fused_bytes is None:
    return f"{'-':>9} {'-':>8} {'-':>9}"
  return f"{_ms(fused_s)} {_ratio(quadratic_s, fused_s, 8)} {fused_bytes / 2**20:9.1f}"


def main(argv):
  del argv
  names = _NORMALIZATIONS.value
  for name in names:
    if name not in registry.names():
      raise app.UsageError(f"--normalizations: {name!r} is none of {registry.names()}")
    if registry.get(name).fast is None:
      raise app.UsageError(f"--normalizations: {name!r} has no fast path")
  lengths = [n for n in (128, 256, 512, 1024, 2048, 4096, 8192)
             if _MIN_N.value <= n <= _MAX_N.value]
  if not lengths:
    raise app.UsageError(f"--min_n={_MIN_N.value} --max_n={_MAX_N.value}: no length of 128 .. "
                         f"8192 lies between them")
  print(f"devices: {jax.devices()}; batch {_BATCH.value}, {cost.NUM_HEADS} heads, "
        f"d_h = {cost.HEAD_DIM}, {_DTYPE.value}")
  width = max(8, *map(len, names))
  print(f"{'norm':>{width}} {'N':>5} {'mode':>7} {'quad ms':>9} {'fast ms':>9} {'speedup':>8} "
        f"{'quad MiB':>9} {'fast MiB':>9} {'mem ratio':>9} {'fast/softmax':>12} "
        f"{'fused ms':>9} {'fused x':>8} {'fused MiB':>9}")
  results = {}
  measured = names + ["softmax"] * ("softmax" not in names)  # the time reference
  for n in lengths:
    costs = cost.measure(measured, n, _REPEATS.value, _MAX_GIB.value * 2 ** 30,
                         time_it=n <= _TIME_MAX_N.value, paths=cost.PATHS,
                         batch=_BATCH.value, dtype=jnp.dtype(_DTYPE.value))
    median = {((name, path), mode): c["seconds"] for (name, path, mode), c in costs.items()}
    for name in names:
      for mode in ("fwd", "fwd+bwd"):
        tq = median.get(((name, "quadratic"), mode))
        tf = median.get(((name, "fast"), mode))
        tu = median.get(((name, "fused"), mode))
        ts = median.get((("softmax", "quadratic"), mode))
        mq = costs[(name, "quadratic", mode)]["bytes"]
        mf = costs[(name, "fast", mode)]["bytes"]
        mu = costs.get((name, "fused", mode), {}).get("bytes")
        results[(name, n, mode)] = (tq, tf, mq, mf, tu)
        print(f"{name:>{width}} {n:5d} {mode:>7} {_ms(tq)} {_ms(tf)} {_ratio(tq, tf, 8)} "
              f"{mq / 2**20:9.1f} {mf / 2**20:9.1f} {mq / mf:9.1f} {_ratio(tf, ts, 12)} "
              f"{_fused_cells(tq, tu, mu)}", flush=True)
    dnas, softmax = (results.get((name, n, "fwd+bwd"), (None,) * 5)[-1]
                     for name in ("dnas", "softmax"))
    if dnas and softmax:  # at once, so that a run stopped at a longer N keeps it
      print(f"dnas_fused_over_softmax_fused_at_{n}={dnas / softmax:.2f}", flush=True)
  if 4096 in lengths and "nap" in names and "dnas" in names:
    tq, tf, *_ = results[("nap", 4096, "fwd+bwd")]
    print(f"nap_speedup_at_4096={tq / tf:.2f}" if tq and tf else "nap_speedup_at_4096=nan")
    _, _, mq, mf, _ = results[("dnas", 4096, "fwd+bwd")]
    print(f"dnas_memory_ratio_at_4096={mq / mf:.2f}")


if __name__ == "__main__":
  app.run(main)
