"""Fig. 1c/1d of Brody et al.: how often n standard-normal keys in d dims include an unselectable
one, without and with LayerNorm. Writes unselectable.json and unselectable.png to --workdir.

  python experiments/analyze_unselectable.py --workdir results/unselectable --runs 20
"""
import argparse
import json
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.analysis.unselectable import fraction_with_unselectable  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--runs", type=int, default=100, help="draws per cell (the paper: 100)")
  parser.add_argument("--dims", default=",".join(str(d) for d in range(3, 16)))
  parser.add_argument("--ns", default=",".join(str(n) for n in range(3, 61)))
  args = parser.parse_args()
  dims = [int(x) for x in args.dims.split(",")]
  ns = [int(x) for x in args.ns.split(",")]
  os.makedirs(args.workdir, exist_ok=True)
  start = time.perf_counter()
  grids = {}
  for with_ln in (False, True):
    grids["with_layer_norm" if with_ln else "without_layer_norm"] = [
        [fraction_with_unselectable(d, n, args.runs, with_ln) for n in ns] for d in dims]
  result = {"dims": dims, "ns": ns, "runs": args.runs, **grids}
  with open(os.path.join(args.workdir, "unselectable.json"), "w") as f:
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
  fig.savefig(os.path.join(args.workdir, "unselectable.png"), dpi=120)
  print(f"{len(dims) * len(ns) * 2} cells x {args.runs} runs in "
        f"{time.perf_counter() - start:.0f} s; {args.workdir}/unselectable.png")


if __name__ == "__main__":
  main()
