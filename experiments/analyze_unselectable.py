"""Fig. 1c/1d of Brody et al.: how often n standard-normal keys in d dims include an unselectable
one, without and with LayerNorm. Writes unselectable.json and unselectable.png to --workdir.

  python experiments/analyze_unselectable.py --workdir results/unselectable --runs 20
"""
import json
import os
import time

import matplotlib
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.analysis.unselectable import fraction_with_unselectable  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figure.")
_RUNS = flags.DEFINE_integer("runs", 100, "draws per cell (the paper: 100)", lower_bound=1)
_DIMS = flags.DEFINE_list("dims", [str(d) for d in range(3, 16)], "Key dimensions d (>= 2).")
_NS = flags.DEFINE_list("ns", [str(n) for n in range(3, 61)], "Numbers of keys n (>= 1).")
flags.mark_flags_as_required(["workdir"])


def integers(flag, low: int):
  """The integers of a list flag, each >= ``low``."""
  try:
    values = [int(x) for x in flag.value]
  except ValueError:
    raise app.UsageError(f"--{flag.name} takes comma-separated integers, "
                         f"got {','.join(flag.value)}") from None
  if not values:
    raise app.UsageError(f"--{flag.name} must not be empty")
  if min(values) < low:
    raise app.UsageError(f"--{flag.name}={','.join(flag.value)}: {min(values)} is below "
                         f"{low}, the smallest it takes")
  return values


def main(argv):
  del argv
  # d >= 2: LayerNorm (Fig. 1d) maps a single coordinate to 0 / 0
  dims, ns = integers(_DIMS, 2), integers(_NS, 1)
  workdir, runs = _WORKDIR.value, _RUNS.value
  os.makedirs(workdir, exist_ok=True)
  start = time.perf_counter()
  grids = {}
  for with_ln in (False, True):
    grids["with_layer_norm" if with_ln else "without_layer_norm"] = [
        [fraction_with_unselectable(d, n, runs, with_ln) for n in ns] for d in dims]
  result = {"dims": dims, "ns": ns, "runs": runs, **grids}
  with open(os.path.join(workdir, "unselectable.json"), "w") as f:
    json.dump(result, f, indent=1)
  fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for ax, (name, title) in zip(axes, (("without_layer_norm", "without LayerNorm (Fig. 1c)"),
                                      ("with_layer_norm", "with LayerNorm (Fig. 1d)"))):
    image = ax.imshow(np.array(grids[name]), origin="lower", aspect="auto", vmin=0, vmax=1,
                      cmap="viridis", extent=(ns[0] - 0.5, ns[-1] + 0.5, dims[0] - 0.5,
                                              dims[-1] + 0.5))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("number of keys n")
  axes[0].set_ylabel("dimension d")
  fig.colorbar(image, ax=axes, label="fraction of runs with an unselectable key")
  fig.savefig(os.path.join(workdir, "unselectable.png"), dpi=120)
  print(f"{len(dims) * len(ns) * 2} cells x {runs} runs in "
        f"{time.perf_counter() - start:.0f} s; {workdir}/unselectable.png")


if __name__ == "__main__":
  app.run(main)
