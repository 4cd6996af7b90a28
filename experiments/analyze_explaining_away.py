"""Ding et al., Fig. 1: the distribution of each key's total attention weight, log sum_i pi_ij, in
trained MTE-layout models with UNAS (softmax) and DNAS weights, on the case-distinction task.
Trains both with the grid engine (one program each), then writes explaining_away.json and
explaining_away.png to --workdir.

  python experiments/analyze_explaining_away.py --workdir results/explaining_away
"""
import json
import os

import jax
import matplotlib
import numpy as np
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from normattn_jax.analysis import explaining_away as ea  # noqa: E402
from normattn_jax.train.config import base_config  # noqa: E402
from normattn_jax.train.grid import Setup, train_grid  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figure.")
_STEPS = flags.DEFINE_integer("steps", 800, "Training steps of each model.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 32, "Sequence length S of the case task.")
_D_MODEL = flags.DEFINE_integer("d_model", 32, "Model dimension.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.0081, "Adam's peak learning rate.")
flags.mark_flags_as_required(["workdir"])


def train(normalization, args):
  """One MTE model of the case task with ``normalization``: its setup, trained parameters
  and final validation accuracy."""
  c = base_config()
  c.archs, c.normalization = ("mte",), normalization
  c.learning_rates = (args["learning_rate"],)
  c.num_seeds = 1
  c.task.seq_len, c.model.d_model = args["seq_len"], args["d_model"]
  c.train.num_steps, c.train.eval_every = args["steps"], args["steps"]
  c.eval.val_batches, c.eval.case_set_size = 4, 100
  run = train_grid(c, c.archs[0])  # one model: one learning rate, one seed
  params = jax.tree.map(lambda a: a[0], run.state.params)
  return Setup(c.archs[0], c), params, float(run.metrics["val_acc"][-1, 0])


def main(argv):
  del argv
  args = {flag.name: flag.value
          for flag in (_WORKDIR, _STEPS, _SEQ_LEN, _D_MODEL, _LEARNING_RATE)}
  workdir, seq_len = args["workdir"], args["seq_len"]
  os.makedirs(workdir, exist_ok=True)
  result, sums = {}, {}
  for name, normalization in (("UNAS", "softmax"), ("DNAS", "dnas")):
    setup, params, val_acc = train(normalization, args)
    tokens, _ = setup.sample(jax.random.key(123), 256, seq_len)
    weights = ea.attention_weights(setup.model(), params, tokens)
    sums[name] = np.concatenate([ea.key_weight_sums(w).ravel() for w in weights])
    result[name] = {"val_acc": val_acc,
                    "explained_away_fraction": ea.explained_away_fraction(sums[name]),
                    # float32 weights can underflow to 0: their log-sum is below this range
                    "underflowed_keys": int(np.sum(sums[name] == 0)),
                    "min_log_sum": float(np.log(sums[name][sums[name] > 0].min())),
                    "log_one_over_S": float(np.log(1.0 / seq_len))}
  fig, ax = plt.subplots(figsize=(6, 3.8))
  low = min(np.log(s[s > 0].min()) for s in sums.values())
  bins = np.linspace(max(low, -40), np.log(seq_len) + 0.5, 80)
  for name, colour in (("UNAS", "tab:blue"), ("DNAS", "tab:red")):
    ax.hist(np.log(np.maximum(sums[name], 1e-300)), bins=bins, alpha=0.6, color=colour,
            label=name)
  ax.axvline(np.log(1.0 / seq_len), color="k", linestyle=":", label="log(1/S)")
  ax.set_xlabel("log of a key's total attention weight")
  ax.set_ylabel("keys (all layers and heads)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "explaining_away.png"), dpi=120)
  with open(os.path.join(workdir, "explaining_away.json"), "w") as f:
    json.dump({"args": args, **result}, f, indent=1)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  app.run(main)
