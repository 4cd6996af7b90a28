"""One process of a multi-process run on this machine, for tests/test_distributed.py:

  python tests/distributed_worker.py sweep|pretrain WORKDIR --devices 2 [--corpus DIR] \
      [--coordinator 127.0.0.1:PORT --num_processes 2 --process_id I] [--max_chunks K]

runs a tiny sweep or pre-training in WORKDIR on ``--devices`` CPU devices of its own, joined to
the other processes when ``--coordinator`` is given, and writes the summary it returns to
``WORKDIR.returned-<process index>.json``. Exit code 3: ``max_chunks`` (evaluations of the
sweep, steps of pre-training) ran out. The same configs serve the experiments' commands:
``--config tests/distributed_worker.py:sweep`` or ``...:pretrain,<corpus dir>``.
"""
import argparse
import glob
import json
import os
import sys

INTERRUPTED = 3


def sweep_config():
  """2 learning rates x 3 seeds: 6 models, padded to 8 over 4 devices, 3 evaluations."""
  from normattn_jax.sweep import base_config
  c = base_config()
  c.archs = ("sum",)
  c.learning_rates = (0.001, 0.0003)
  c.num_seeds = 3
  c.task.update(name="mode_finding", vocab_size=10, output="classes", seq_len=8)
  c.model.update(d_model=8, num_heads=2, num_layers=1)
  c.train.update(num_steps=30, eval_every=10, batch_size=4, checkpoint_every=1)
  c.eval.update(val_batches=2)
  return c


def pretrain_config(corpus):
  """A 2-layer HNAS ALBERT on the text files in ``corpus``, which the run prepares (TFDS,
  SentencePiece, examples): batch 8 over 4 devices, 6 steps, checkpoints every 2."""
  from normattn_jax.pretrain.train import base_pretrain_config
  c = base_pretrain_config()
  c.model.update(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=32)
  c.model.attention.name = "hnas"
  c.data.update(corpus="files", files=tuple(sorted(glob.glob(os.path.join(corpus, "*.txt")))),
                vocab_size=60, max_seq_length=32, max_predictions_per_seq=4, dupe_factor=2,
                validation_fraction=0.2)
  c.train.update(batch_size=8, num_steps=6, learning_rate=0.01, warmup_steps=2, log_every=1,
                 eval_every=3, eval_batches=2, checkpoint_every=2)
  return c


def get_config(spec="sweep"):
  """The config for ``--config tests/distributed_worker.py:<spec>``: ``sweep`` or
  ``pretrain,<corpus dir>``."""
  job, _, corpus = spec.partition(",")
  return sweep_config() if job == "sweep" else pretrain_config(corpus)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("job", choices=("sweep", "pretrain"))
  parser.add_argument("workdir")
  parser.add_argument("--devices", type=int, default=1)
  parser.add_argument("--corpus", default="")
  parser.add_argument("--coordinator", default="")
  parser.add_argument("--num_processes", type=int, default=0)
  parser.add_argument("--process_id", type=int, default=-1)
  parser.add_argument("--max_chunks", type=int, default=None)
  args = parser.parse_args()
  os.environ["JAX_PLATFORMS"] = "cpu"
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + f" --xla_force_host_platform_device_count={args.devices}")

  import jax
  from normattn_jax.train import multihost
  if args.coordinator:
    multihost.initialize(args.coordinator, args.num_processes, args.process_id)
  assert jax.local_device_count() == args.devices, jax.local_devices()

  from normattn_jax.train.driver import Budget, Interrupted
  budget = Budget(chunks=args.max_chunks)
  try:
    if args.job == "sweep":
      from normattn_jax.sweep.train import run_sweep
      summary = run_sweep(sweep_config(), args.workdir, budget=budget, show_progress=False,
                          tensorboard=False)
    else:
      from normattn_jax.pretrain.train import run_pretraining
      summary = run_pretraining(pretrain_config(args.corpus), args.workdir, budget=budget,
                                show_progress=False, tensorboard=False)
  except Interrupted as stop:
    print(f"process {jax.process_index()}: {stop}", flush=True)
    sys.exit(INTERRUPTED)
  with open(f"{args.workdir}.returned-{jax.process_index()}.json", "w") as f:
    json.dump(summary, f, indent=2, sort_keys=True)


if __name__ == "__main__":
  main()
