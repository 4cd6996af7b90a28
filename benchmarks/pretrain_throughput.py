"""Pre-training throughput of ALBERT with UNAS (softmax), DNAS and HNAS attention.

Times the compiled train step of ``normattn_jax.pretrain.train.Trainer`` (forward, backward,
ALBERT's LAMB) on random batches of the config's shape, the schemes interleaved round by round
(each round starts with the next, so that no scheme always runs first),
and prints the median tokens/s of each, its ratio to softmax and XLA's cost analysis of the
compiled step (GFLOP and GB of memory traffic per step: where a time ratio disagrees with the work
done, these say which program does more):

  python benchmarks/pretrain_throughput.py [--config albert_tiny] [--rounds 5]
      [--steps 5] [--config.model.dtype=float32|bfloat16] [--config.train.batch_size=64]
"""
import statistics
import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from normattn_jax.cli import command as cli
from normattn_jax.pretrain.train import Trainer, validate_pretrain_config

_CONFIG = cli.define_config_flag("albert_tiny", "An ALBERT pre-training config (albert_*).")
_ATTENTIONS = flags.DEFINE_list("attentions", ["softmax", "dnas", "hnas"],
                                "Attention normalisations to time; the first is the reference.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed rounds, the schemes interleaved in each.")
_STEPS = flags.DEFINE_integer("steps", 5, "Train steps per timed round.")


def random_batch(c, rng):
  b, s, p = c.train.batch_size, c.data.max_seq_length, c.data.max_predictions_per_seq
  return {"input_ids": rng.integers(5, c.data.vocab_size, (b, s)).astype(np.int32),
          "input_mask": np.ones((b, s), np.int32),
          "segment_ids": (np.arange(s) >= s // 2).astype(np.int32)[None].repeat(b, 0),
          "masked_lm_positions": rng.integers(1, s, (b, p)).astype(np.int32),
          "masked_lm_ids": rng.integers(5, c.data.vocab_size, (b, p)).astype(np.int32),
          "masked_lm_weights": np.ones((b, p), np.float32),
          "sentence_order_label": rng.integers(0, 2, b).astype(np.int32)}


def main(argv):
  del argv
  base = _CONFIG.value
  names = _ATTENTIONS.value
  tokens = base.train.batch_size * base.data.max_seq_length
  rng = np.random.default_rng(0)
  runs, work = {}, {}
  for name in names:
    c = base.copy_and_resolve_references()
    c.model.attention.name = name
    validate_pretrain_config(c)
    trainer = Trainer(c, c.data.vocab_size)
    sharded = lambda b, t=trainer: {k: jax.device_put(v, t.batch_sharding) for k, v in b.items()}
    batch = sharded(random_batch(c, rng))
    state = trainer.init(jax.random.key(0), batch)
    step = trainer.train_step.lower(state, batch).compile()  # timed below, so compiled once
    analysis = step.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    work[name] = (analysis.get("flops", 0.0) / 1e9, analysis.get("bytes accessed", 0.0) / 1e9)
    state, metrics = step(state, batch)  # warm up
    jax.block_until_ready(metrics["loss"])
    runs[name] = [step, state, batch]
  times = {name: [] for name in names}
  for round_ in range(_ROUNDS.value):
    for name in names[round_ % len(names):] + names[:round_ % len(names)]:  # each goes first
      step, state, batch = runs[name]
      began = time.perf_counter()
      for _ in range(_STEPS.value):
        state, metrics = step(state, batch)
      jax.block_until_ready(metrics["loss"])
      times[name].append((time.perf_counter() - began) / _STEPS.value)
      runs[name][1] = state
  path = config_flags.get_config_filename(flags.FLAGS["config"])
  print(f"devices: {jax.devices()}; config {path}, dtype {base.model.dtype}, batch "
        f"{base.train.batch_size} x {base.data.max_seq_length} tokens, "
        f"{base.model.num_hidden_layers} layers, hidden {base.model.hidden_size}, attention "
        f"implementation {base.model.attention_implementation}")
  reference = statistics.median(times[names[0]])
  print(f"{'attention':>10} {'ms/step':>9} {'tokens/s':>10} {'time / ' + names[0]:>16} "
        f"{'GFLOP/step':>11} {'GB/step':>8}")
  for name in names:
    median = statistics.median(times[name])
    print(f"{name:>10} {median * 1e3:9.1f} {tokens / median:10.0f} {median / reference:16.2f} "
          f"{work[name][0]:11.1f} {work[name][1]:8.2f}")


if __name__ == "__main__":
  app.run(main)
