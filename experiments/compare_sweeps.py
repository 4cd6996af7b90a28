"""Two finished sweeps of one grid, side by side: a change that moves the arithmetic (the
dropout rate as data of the program rather than a number, say) keeps the results where every
arch's best cell agrees within the seeds' spread at every swept value, by the rule of
``compare_precision.compare`` (the same learning rate or a tie, the two bests within the larger
spread).

  python experiments/compare_sweeps.py WORKDIR_A WORKDIR_B

One line per swept value (or static point), split and arch, then the count:

  point=train.dropout=0.0625 split=val arch=nap a=0.885@0.027 b=0.844@0.027 spread=0.133 same=yes
  same_best_cells=12/12
"""
from __future__ import annotations

import json
import os
import sys

from compare_precision import SPLITS, compare


def cells(summary: dict, split: str) -> dict:
  """(point, arch) -> {learning rate: (mean, spread)} of ``split``'s accuracy (at its best over
  training; a learning rate whose every seed diverged scores 0)."""
  out = {}
  for cell in summary["cells"]:
    stats = cell["metrics"][f"{split}_acc"]
    point = ",".join(f"{k}={v:g}" for k, v in sorted(cell["params"].items())) or "-"
    spread = (stats["max"] or 0.0) - (stats["min"] or 0.0)
    out.setdefault((point, cell["arch"]), {})[cell["learning_rate"]] = (stats["mean"] or 0.0,
                                                                        spread)
  return out


def lines(a: dict, b: dict) -> list[str]:
  """The comparison of two summaries: a line per point, split and arch, then the count."""
  out, same = [], []
  for split in SPLITS:
    cells_a, cells_b = cells(a, split), cells(b, split)
    if cells_a.keys() != cells_b.keys():
      raise ValueError(f"the sweeps hold other cells: {sorted(cells_a)} and {sorted(cells_b)}")
    for point, arch in sorted(cells_a):
      r = compare(cells_a[point, arch], cells_b[point, arch])
      same.append(r["same"])
      (best_a, lr_a), (best_b, lr_b) = r["float32"], r["bfloat16"]
      out.append(f"point={point} split={split} arch={arch} a={best_a:.3f}@{lr_a:g} "
                 f"b={best_b:.3f}@{lr_b:g} spread={r['spread']:.3f} "
                 f"same={'yes' if r['same'] else 'no'}")
  out.append(f"same_best_cells={sum(same)}/{len(same)}")
  return out


def main(argv: list[str]) -> None:
  if len(argv) != 3:
    sys.exit(__doc__)
  summaries = []
  for workdir in argv[1:]:
    with open(os.path.join(workdir, "summary.json")) as f:
      summaries.append(json.load(f))
  print("\n".join(lines(*summaries)))


if __name__ == "__main__":
  main(sys.argv)
