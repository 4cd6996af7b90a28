"""Ding et al., Fig. 1: the distribution of each key's total attention weight, log sum_i pi_ij, in
trained MTE-layout models with UNAS (softmax) and DNAS weights, on the case-distinction task.
Trains both with the grid engine (one program each), then writes explaining_away.json and
explaining_away.png to --workdir.

  python experiments/analyze_explaining_away.py --workdir results/explaining_away
"""
import argparse
import json
import os
import sys

import jax
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from normattn_jax.analysis import explaining_away as ea  # noqa: E402
from normattn_jax.train.config import base_config  # noqa: E402
from normattn_jax.train.grid import Grid, Setup  # noqa: E402
from normattn_jax.train.sweep import hyperparameter_grid, model_keys  # noqa: E402


def train(normalization, args):
  c = base_config()
  c.normalization = normalization
  c.learning_rates = (args.learning_rate,)
  c.num_seeds = 1
  c.task.seq_len, c.model.d_model = args.seq_len, args.d_model
  c.train.num_steps, c.train.eval_every = args.steps, args.steps
  c.eval.val_batches, c.eval.case_set_size = 4, 100
  setup = Setup("mte", c)
  hp, seeds, _ = hyperparameter_grid(c)
  grid = Grid.build(setup, len(seeds))
  hp_dev = grid.shard(hp)
  state = grid.init(grid.shard(model_keys(c.seed, seeds)), hp_dev)
  state, metrics = grid.chunk(state, hp_dev)
  params = jax.tree.map(lambda a: a[0], state.params)
  return setup, params, float(metrics["val_acc"][0])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--steps", type=int, default=800)
  parser.add_argument("--seq_len", type=int, default=32)
  parser.add_argument("--d_model", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=0.0081)
  args = parser.parse_args()
  os.makedirs(args.workdir, exist_ok=True)
  result, sums = {}, {}
  for name, normalization in (("UNAS", "softmax"), ("DNAS", "dnas")):
    setup, params, val_acc = train(normalization, args)
    tokens, _ = setup.sample(jax.random.key(123), 256, args.seq_len)
    weights = ea.attention_weights(setup.model(), params, tokens)
    sums[name] = np.concatenate([ea.key_weight_sums(w).ravel() for w in weights])
    result[name] = {"val_acc": val_acc,
                    "explained_away_fraction": ea.explained_away_fraction(sums[name]),
                    "min_log_sum": float(np.log(sums[name].min())),
                    "log_one_over_S": float(np.log(1.0 / args.seq_len))}
  fig, ax = plt.subplots(figsize=(6, 3.8))
  low = min(np.log(s.min()) for s in sums.values())
  bins = np.linspace(max(low, -40), np.log(args.seq_len) + 0.5, 80)
  for name, colour in (("UNAS", "tab:blue"), ("DNAS", "tab:red")):
    ax.hist(np.log(np.maximum(sums[name], 1e-300)), bins=bins, alpha=0.6, color=colour,
            label=name)
  ax.axvline(np.log(1.0 / args.seq_len), color="k", linestyle=":", label="log(1/S)")
  ax.set_xlabel("log of a key's total attention weight")
  ax.set_ylabel("keys (all layers and heads)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(args.workdir, "explaining_away.png"), dpi=120)
  with open(os.path.join(args.workdir, "explaining_away.json"), "w") as f:
    json.dump({"args": vars(args), **result}, f, indent=1)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main()
