"""Fine-tuning throughput: the seeds of a task as ONE compiled program against the same runs one
after another.

  python benchmarks/finetune_throughput.py --seeds 5 --rounds 5

Builds the fine-tuning program of ``finetune.train`` (classification head, BERT's AdamW, the
training steps of one evaluation interval and a small dev evaluation) on an ALBERT of
the ``albert_tiny`` config's shape (random parameters: the speed does not depend on them)
and random token features, then times, round by round and interleaved: (a) one program holding all
``--seeds`` models, at each vmap width of ``--widths`` (1: the models run one after another
inside the program, a ``lax.map``; ``--seeds``: one vmap of all), and (b) ``--seeds`` calls of
the one-model program, one per seed, as separate runs would. Prints the median model-steps per
second of each and its ratio to (b), measured side by side in one run.
"""
import argparse
import statistics
import time

import jax
import numpy as np

from normattn_jax.finetune import encoders
from normattn_jax.finetune import task as task_lib
from normattn_jax.finetune import train as ft
from normattn_jax.models.albert import AlbertConfig, AlbertModel
from normattn_jax.train import grid as grid_lib


def albert_tiny(attention: str, seq_len: int) -> encoders.StartingPoint:
  """``normattn_jax/configs/albert_tiny.py``'s encoder with random parameters."""
  config = AlbertConfig(vocab_size=8000, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=512, max_position_embeddings=128,
                        attention=attention)
  module = AlbertModel(config)
  params = module.init(jax.random.key(0), np.zeros((1, seq_len), np.int32))["params"]
  return encoders.StartingPoint(module, jax.tree.map(np.asarray, params), None,
                                f"random albert_tiny ({attention})", 128)


def random_task(num_train: int, num_dev: int, seq_len: int) -> task_lib.FinetuneTask:
  rng = np.random.default_rng(0)

  def split(n):
    mask = np.ones((n, seq_len), np.int32)
    mask[:, seq_len * 3 // 4:] = 0  # a quarter padding, as short passages have
    return {"input_ids": rng.integers(5, 8000, (n, seq_len)).astype(np.int32),
            "token_type_ids": np.zeros((n, seq_len), np.int32), "attention_mask": mask,
            "label": rng.integers(0, 3, n).astype(np.int32)}
  return task_lib.FinetuneTask("random", "classification", 3, split(num_train), split(num_dev),
                               lambda predictions: {"accuracy": 0.0}, ("accuracy",))


def program(args, start, task, seeds: int, width: int):
  """A compiled grid of ``seeds`` models (one learning rate) and its arguments."""
  c = ft.base_finetune_config()
  c.num_seeds, c.learning_rates = seeds, (3e-4,)
  c.train.update(batch_size=args.batch_size, num_steps=args.steps, warmup_steps=1,
                 eval_every=args.steps, eval_batch_size=len(task.dev["label"]),
                 models_per_vmap=width)
  hp, seed_ids = ft.hyperparameter_grid(c)
  grid, _ = ft.build_grid(c, task, start, len(seed_ids))
  rows = np.stack([ft.batch_rows(0, int(s), 0, args.steps, args.batch_size,
                                 len(task.train["label"])) for s in seed_ids])
  per_model = grid.shard(dict(hp, rows=rows))
  state = grid.init(grid.shard(grid_lib.model_keys(0, seed_ids)), per_model, *grid.shared)
  return grid, state, per_model


def timed(grid, state, per_model):
  began = time.perf_counter()
  state, out = grid.chunk(state, per_model)
  jax.block_until_ready(out)
  return state, time.perf_counter() - began


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--seeds", type=int, default=5)
  parser.add_argument("--widths", default="1,5", help="vmap widths of the one-program grid")
  parser.add_argument("--attention", default="softmax")
  parser.add_argument("--seq_len", type=int, default=64)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--steps", type=int, default=10, help="training steps per timed call")
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  widths = [int(w) for w in args.widths.split(",")]
  start = albert_tiny(args.attention, args.seq_len)
  task = random_task(512, 32, args.seq_len)
  grids = {f"one program, vmap width {w}": program(args, start, task, args.seeds, w)
           for w in widths}
  single = program(args, start, task, 1, 1)
  times = {name: [] for name in list(grids) + ["runs one after another"]}
  for name, (grid, state, arguments) in grids.items():  # compile, then time
    grids[name] = (grid, timed(grid, state, arguments)[0], arguments)
  single = (single[0], timed(*single)[0], single[2])
  for _ in range(args.rounds):
    for name, (grid, state, arguments) in grids.items():
      state, seconds = timed(grid, state, arguments)
      grids[name] = (grid, state, arguments)
      times[name].append(seconds)
    total = 0.0
    for _ in range(args.seeds):
      state, seconds = timed(*single)
      single = (single[0], state, single[2])
      total += seconds
    times["runs one after another"].append(total)
  model_steps = args.seeds * args.steps
  reference = statistics.median(times["runs one after another"])
  print(f"{args.seeds} seeds x {args.steps} steps of batch {args.batch_size} x {args.seq_len}, "
        f"albert_tiny ({args.attention}), {jax.devices()[0].device_kind}, "
        f"{args.rounds} rounds (medians)")
  print(f"{'':>30} {'model-steps/s':>14} {'speed-up':>9}")
  for name, values in times.items():
    median = statistics.median(values)
    print(f"{name:>30} {model_steps / median:14.1f} {reference / median:9.2f}")


if __name__ == "__main__":
  main()
