"""Ding et al., Appendix E (Fig. 6-9): UNAS vs DNAS self-attention on two Gaussian clusters, and
the analytic centre distances of Eq. 13/14 against the simulated update (Fig. 7). Writes
mode_collapse.json and the figures to --workdir.

  python experiments/analyze_mode_collapse.py --workdir results/mode_collapse
"""
import json
import os

import matplotlib
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.analysis import mode_collapse as mc  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figures.")
flags.mark_flags_as_required(["workdir"])


def cloud_figure(points, labels, path, title):
  fig, axes = plt.subplots(2, 5, figsize=(14, 5.6), sharex=True, sharey=True)
  summary = {}
  for row, scheme in enumerate(("unas", "dnas")):
    clouds = mc.trajectory(points, scheme)
    summary[scheme] = [mc.count_clusters(c) for c in clouds]
    for step, cloud in enumerate(clouds):
      ax = axes[row, step]
      ax.scatter(*cloud[labels == 0].T, s=4, c="tab:red")
      ax.scatter(*cloud[labels == 1].T, s=4, c="tab:blue")
      ax.set_title(f"{scheme.upper()} step {step}: {summary[scheme][step]} cluster(s)",
                   fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return summary


def distance_figure(path):
  ratios = np.geomspace(0.05, 20, 200)
  checks = []
  fig, ax = plt.subplots(figsize=(6, 4))
  for a, colour in ((0.5, "tab:green"), (1.0, "tab:purple"), (1.5, "tab:brown")):
    ax.plot(ratios, mc.center_distance_unas(ratios, a), color=colour, label=f"UNAS, a={a}")
    ax.plot(ratios, mc.center_distance_dnas(ratios, a), "--", color=colour, label=f"DNAS, a={a}")
    for n0, n1 in ((5, 50), (10, 20), (20, 20), (40, 10), (60, 6)):
      for scheme, marker in (("unas", "o"), ("dnas", "s")):
        simulated = mc.simulated_center_distance(n0, n1, a, scheme)
        analytic = (mc.center_distance_unas if scheme == "unas" else mc.center_distance_dnas)(
            n0 / n1, a)
        checks.append(abs(simulated - float(analytic)))
        ax.plot(n0 / n1, simulated, marker, color=colour, markersize=4, fillstyle="none")
  ax.set_xscale("log")
  ax.set_xlabel("r = N0 / N1")
  ax.set_ylabel("centre distance after one update")
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return max(checks)


def main(argv):
  del argv
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
  result = {}
  for name, (n0, n1) in {"unbalanced": (500, 50), "balanced": (225, 225)}.items():
    points, labels = mc.two_gaussians(n0=n0, n1=n1)
    result[name] = cloud_figure(points, labels, os.path.join(workdir, f"{name}.png"),
                                f"{n0} vs {n1} points")
  result["max_abs_error_eq13_eq14_vs_simulation"] = distance_figure(
      os.path.join(workdir, "center_distance.png"))
  with open(os.path.join(workdir, "mode_collapse.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result))


if __name__ == "__main__":
  app.run(main)
