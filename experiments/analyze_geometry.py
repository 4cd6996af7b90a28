"""Sinkhorn residuals per iteration (Ding et al., Section 3.2) and the sequence-length dependence of
pooled outputs at initialisation (Richter & Wattenhofer, Fig. 1 middle/right, Appendix B).
Writes geometry.json, sinkhorn.png and pooling_scale.png to --workdir.

  python experiments/analyze_geometry.py --workdir results/geometry
"""
import json
import os

import jax
import matplotlib
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from normattn_jax.analysis import geometry  # noqa: E402

LENGTHS = (1, 2, 4, 8, 16, 32, 64, 128, 512, 1024, 2048)  # the paper's N

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figures.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)

  sinkhorn = {}
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for scale in (1.0, 3.0, 10.0):
    logits = scale * jax.random.normal(jax.random.key(0), (64, 64))
    sinkhorn[f"logit_std={scale:g}"] = res = geometry.sinkhorn_residuals(logits, 30)
    ax.semilogy(range(1, 31), res["column"], label=f"columns, logit std {scale:g}")
  ax.set_xlabel("Sinkhorn iterations (1 = DNAS)")
  ax.set_ylabel("max |column sum - 1|")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "sinkhorn.png"), dpi=120)
  plt.close(fig)

  stats = {n: geometry.pooled_output_scale(n) for n in LENGTHS}
  exponents = {}
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  for method in geometry.POOLINGS:
    for ax, key in zip(axes, ("std", "norm")):
      values = [stats[n][method][key] for n in LENGTHS]
      ax.loglog(LENGTHS, values, "o-", label=method, markersize=3)
      exponents[f"{method} {key}"] = geometry.scaling_exponent(LENGTHS[2:], values[2:])
  for ax, key in zip(axes, ("standard deviation", "mean norm")):
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(f"{key} of the pooled output")
  axes[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "pooling_scale.png"), dpi=120)
  plt.close(fig)

  result = {"sinkhorn": sinkhorn, "pooling": {str(n): s for n, s in stats.items()},
            "log_log_slope_from_N_4": exponents}
  with open(os.path.join(workdir, "geometry.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(exponents, indent=1))


if __name__ == "__main__":
  app.run(main)
