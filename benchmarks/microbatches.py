"""Does splitting a step's batch into micro-batches keep the elementwise tails in cache?

At the NAP paper's defaults (MTE, d = N = 128, L = 2, H = 4, batch 32) a step's activations are
MiB-sized arrays ([32, 128, 512] for the FFN's hidden layer: 8 MiB) that its LayerNorms, softmax
and GELU read and write in passes from L3. Cut into k micro-batches of 32 / k sequences, each
micro-batch's forward and backward works on arrays k times smaller (8 sequences: the hidden layer
in 2 MiB, the attention weights in 2 MiB), and the gradients are summed in a ``lax.scan``. Each k
is a program of ``--steps`` plain gradient steps of one model on one device, timed interleaved
over ``--rounds`` rounds; the printed ratio is each k's median step time against k = 1's, and
the gradients of every k are checked against k = 1's first.

  python benchmarks/microbatches.py [--microbatches 1,2,4,8,16] [--rounds 9] [--steps 4]
      [--d_model 128] [--seq_len 128]

Measure on quiet cores.
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import optax
from absl import app, flags

from normattn_jax.sweep import base_config
from normattn_jax.sweep.programs import Setup

_MICROBATCHES = flags.DEFINE_list("microbatches", ["1", "2", "4", "8", "16"],
                                  "Micro-batch counts k; each divides the batch of 32.")
_ROUNDS = flags.DEFINE_integer("rounds", 9, "Rounds; each times every k once.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 4, "Gradient steps per timed call.", lower_bound=1)
_D_MODEL = flags.DEFINE_integer("d_model", 128, "Model width.", lower_bound=1)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Sequence length N.", lower_bound=1)


def gradients_in(k: int, model, batch_size: int):
  """The batch's mean-loss gradient as the mean of ``k`` micro-batches' gradients."""
  def loss(params, inputs, labels):
    logits = model.apply(params, inputs).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  def gradients(params, inputs, labels):
    split = lambda a: a.reshape((k, batch_size // k) + a.shape[1:])

    def add(total, batch):
      return jax.tree.map(jnp.add, total, jax.grad(loss)(params, *batch)), None
    total, _ = jax.lax.scan(add, jax.tree.map(jnp.zeros_like, params),
                            (split(inputs), split(labels)))
    return jax.tree.map(lambda g: g / k, total)
  return gradients


def main(argv):
  del argv
  c = base_config()
  c.model.d_model, c.task.seq_len = _D_MODEL.value, _SEQ_LEN.value
  setup = Setup("mte", c)
  model, batch_size, n = setup.model(), c.train.batch_size, c.task.seq_len
  counts = [int(k) for k in _MICROBATCHES.value]
  if bad := [k for k in counts if k < 1 or batch_size % k]:
    raise ValueError(f"--microbatches: {bad} do not divide the batch of {batch_size}")
  params = model.init(jax.random.key(0), jnp.zeros((1, n), jnp.int32))
  inputs, labels = setup.sample(jax.random.key(1), batch_size, n)

  def program(k):
    gradients = gradients_in(k, model, batch_size)

    def steps(params):
      step = lambda p, _: (jax.tree.map(lambda w, g: w - 1e-4 * g, p,
                                        gradients(p, inputs, labels)), None)
      return jax.lax.scan(step, params, None, length=_STEPS.value)[0]
    return jax.jit(gradients), jax.jit(steps)

  programs = {k: program(k) for k in counts}
  reference = programs[1][0](params, inputs, labels) if 1 in programs else None
  for k, (gradients, steps) in programs.items():
    jax.block_until_ready(steps(params))  # compile and warm up
    if reference is not None:
      found = gradients(params, inputs, labels)
      error = max(float(jnp.max(jnp.abs(a - b)))
                  for a, b in zip(jax.tree.leaves(found), jax.tree.leaves(reference)))
      print(f"k={k}: largest gradient difference from k=1: {error:.1e}")
  times = {k: [] for k in counts}
  for _ in range(_ROUNDS.value):
    for k, (_, steps) in programs.items():
      start = time.perf_counter()
      jax.block_until_ready(steps(params))
      times[k].append((time.perf_counter() - start) / _STEPS.value)
  base = statistics.median(times[counts[0]])
  print(f"| k | sequences each | ms/step (median) | range | speed / k={counts[0]} |")
  print("|---|---|---|---|---|")
  for k in counts:
    median = statistics.median(times[k])
    print(f"| {k} | {batch_size // k} | {1000 * median:.1f} | {1000 * min(times[k]):.0f}-"
          f"{1000 * max(times[k]):.0f} | {base / median:.2f} |")


if __name__ == "__main__":
  app.run(main)
