"""The cost of an attention normalisation: time and peak scratch memory of the forward pass and
of forward + backward, for the quadratic path (the weight matrix, ``attention/weights.py``), the
fast path (``attention/fast.py``) and the fused path (``attention/fused.py``), at batch 1 (or
the one given), ``NUM_HEADS`` heads of ``HEAD_DIM``.

Memory is XLA's compiled memory analysis (temporaries plus outputs), so it is known without
running a program; time is the median of timed calls, the variants interleaved. Shared by
``benchmarks/attention_scaling.py`` and the report card (``card/train.py``).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional, Sequence, Union

import jax
import jax.numpy as jnp

from normattn_jax.attention.registry import AttentionSpec

NUM_HEADS, HEAD_DIM = 8, 64
MODES = ("fwd", "fwd+bwd")
PATHS = ("quadratic", "fast", "fused")
REPORT_PATHS = ("quadratic", "fast")  # what ``measure`` measures unless told (report cards)


def _spec(spec: Union[str, AttentionSpec]) -> AttentionSpec:
  return AttentionSpec.of(spec)


def quadratic(spec: Union[str, AttentionSpec], heads: int = NUM_HEADS) -> Callable:
  """Attention through the normalisation's weight matrix, at its initial per-head params.

  Args:
    spec: a registered normalisation's name, or an ``AttentionSpec`` with its options.
    heads: the number of heads (of the per-head params).

  Returns:
    ``attend(q, k, v)`` on ``[batch, heads, n, d]`` arrays.
  """
  spec = _spec(spec)
  norm, options = spec.normalization, spec.resolved()
  params = norm.initial_params(heads, options)

  def attend(q, k, v):
    logits = jnp.einsum("...qd,...kd->...qk", q, k)
    weights = norm.attention_weights(logits, None, params, options)
    return jnp.einsum("...qk,...ke->...qe", weights, v)
  return attend


def fast_path(spec: Union[str, AttentionSpec], heads: int = NUM_HEADS) -> Optional[Callable]:
  """The normalisation's fast path, at its initial per-head params; None if it has none.

  Args:
    spec: a registered normalisation's name, or an ``AttentionSpec`` with its options.
    heads: the number of heads.

  Returns:
    ``attend(q, k, v)``, or None.
  """
  spec = _spec(spec)
  norm, options = spec.normalization, spec.resolved()
  if norm.fast is None:
    return None
  params = norm.initial_params(heads, options)
  return lambda q, k, v: norm.fast_attention(q, k, v, params, options)


def fused_path(spec: Union[str, AttentionSpec], heads: int = NUM_HEADS) -> Optional[Callable]:
  """The normalisation's fused path, at its initial per-head params; None if it has none.

  Args:
    spec: a registered normalisation's name, or an ``AttentionSpec`` with its options.
    heads: the number of heads.

  Returns:
    ``attend(q, k, v)`` on ``[batch, heads, n, d]`` arrays (swapped to the fused layout
    ``[batch, n, heads, d]`` and back), or None.
  """
  spec = _spec(spec)
  norm, options = spec.normalization, spec.resolved()
  if norm.fused is None:
    return None
  params = norm.initial_params(heads, options)
  swap = lambda x: jnp.swapaxes(x, -2, -3)
  return lambda q, k, v: swap(norm.fused_attention(swap(q), swap(k), swap(v), params, options))


MAKERS = {"quadratic": quadratic, "fast": fast_path, "fused": fused_path}


def inputs(n: int, heads: int = NUM_HEADS, head_dim: int = HEAD_DIM, *, batch: int = 1,
           dtype=jnp.float32) -> tuple:
  """Queries, keys and values ``[batch, heads, n, head_dim]`` (scaled so logits are O(1)).

  Args:
    n: the sequence length.
    heads: the number of heads.
    head_dim: the size of each head.
    batch: the batch size.
    dtype: their dtype (drawn in float32, then cast: bf16 is what reaches cuDNN's kernel).

  Returns:
    ``(q, k, v)``, drawn from a key fixed by ``n``.
  """
  keys = jax.random.split(jax.random.key(n), 3)
  return tuple((jax.random.normal(key, (batch, heads, n, head_dim)) / head_dim ** 0.25)
               .astype(dtype) for key in keys)


def programs(fn: Callable, args: tuple) -> dict:
  """Compiled forward and forward+backward programs with their scratch memory.

  Args:
    fn: ``attend(q, k, v)``.
    args: ``(q, k, v)``.

  Returns:
    ``{mode: (compiled program, bytes)}`` for each of ``MODES``.
  """
  forward = jax.jit(fn)
  both = jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(fn(q, k, v) ** 2), argnums=(0, 1, 2)))
  out = {}
  for mode, f in zip(MODES, (forward, both)):
    compiled = f.lower(*args).compile()
    mem = compiled.memory_analysis()
    out[mode] = (compiled, mem.temp_size_in_bytes + mem.output_size_in_bytes)
  return out


def timed(compiled: Callable, args: tuple) -> float:
  """Seconds of one call of ``compiled`` on ``args``, to its results being ready."""
  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  return time.perf_counter() - start


def measure(specs: Sequence[Union[str, AttentionSpec]], n: int, repeats: int = 3,
            max_bytes: float = 6 * 2 ** 30, time_it: bool = True,
            paths: Sequence[str] = REPORT_PATHS, batch: int = 1, dtype=jnp.float32) -> dict:
  """Time and memory of every spec's paths at one sequence length.

  Args:
    specs: normalisations (names or specs); a path a normalisation lacks is left out.
    n: the sequence length.
    repeats: timed calls per program, after one warm-up call.
    max_bytes: a program whose scratch memory exceeds this is compiled but not run.
    time_it: False measures the memory alone.
    paths: the paths to measure, of ``PATHS``.
    batch: the batch size of the inputs.
    dtype: the dtype of the inputs.

  Returns:
    ``{(str(spec), path, mode): {"seconds": median or None (not run), "bytes": int}}``.
  """
  args = inputs(n, batch=batch, dtype=dtype)
  compiled = {}
  for spec in specs:
    for path in paths:
      fn = MAKERS[path](spec)
      if fn is not None:
        for mode, program in programs(fn, args).items():
          compiled[(str(_spec(spec)), path, mode)] = program
  runnable = {key: c for key, (c, mem) in compiled.items() if time_it and mem <= max_bytes}
  for c in runnable.values():  # warm up
    timed(c, args)
  samples = {key: [] for key in runnable}
  for _ in range(repeats):
    for key, c in runnable.items():
      samples[key].append(timed(c, args))
  return {key: {"seconds": statistics.median(samples[key]) if key in samples else None,
                "bytes": int(mem)}
          for key, (_, mem) in compiled.items()}
