"""Brody et al., Fig. 2a/2b/3: the majority task with LayerNorm before attention with and without
its projection; 10 seeds in one vmapped program per variant. Writes majority.json and
majority.png to --workdir.

  python experiments/analyze_majority.py --workdir results/majority [--batch_size 6000 --steps 2000]
"""
import argparse
import json
import os
import sys

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from normattn_jax.analysis.majority import train_majority  # noqa: E402

VARIANTS = {"with projection": "standard", "without projection": "no_projection"}


def steps_to(curves, steps, threshold):
  """First evaluation step at which the seeds' mean test accuracy reaches ``threshold``."""
  reached = np.flatnonzero(curves["test_acc"].mean(-1) >= threshold)
  return int(steps[reached[0]]) if len(reached) else None


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--num_seeds", type=int, default=10)
  parser.add_argument("--batch_size", type=int, default=6000)
  parser.add_argument("--steps", type=int, default=2000)
  parser.add_argument("--eval_every", type=int, default=50)
  args = parser.parse_args()
  os.makedirs(args.workdir, exist_ok=True)
  results = {name: train_majority(kind, num_seeds=args.num_seeds, batch_size=args.batch_size,
                                  steps=args.steps, eval_every=args.eval_every, verbose=True)
             for name, kind in VARIANTS.items()}
  fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
  summary = {"args": vars(args)}
  for (name, curves), colour in zip(results.items(), ("tab:red", "tab:blue")):
    steps = curves["steps"]
    for ax, key in zip(axes, ("train_loss", "test_acc", "query_angle")):
      values = curves[key]
      ax.plot(steps, values.mean(-1), color=colour, label=name)
      ax.fill_between(steps, values.min(-1), values.max(-1), color=colour, alpha=0.25)
      ax.set_xlabel("step")
      ax.set_ylabel(key.replace("_", " "))
    summary[name] = {
        "final_test_acc_mean": float(curves["test_acc"][-1].mean()),
        "final_train_loss_mean": float(curves["train_loss"][-1].mean()),
        "final_query_angle_deg": float(curves["query_angle"][-1].mean()),
        "steps_to_90pct_test_acc": steps_to(curves, steps, 0.9),
        "steps_to_50pct_test_acc": steps_to(curves, steps, 0.5)}
  axes[0].legend()
  fig.tight_layout()
  fig.savefig(os.path.join(args.workdir, "majority.png"), dpi=120)
  with open(os.path.join(args.workdir, "majority.json"), "w") as f:
    json.dump(summary, f, indent=1)
  print(json.dumps(summary, indent=1))


if __name__ == "__main__":
  main()
