"""The NAP paper's regularisation tables (Tables 2-4) from finished sweeps, as markdown:

  python experiments/regularization_table.py results/<l2 run> results/<dropout run>

Each run is one of configs/regularization.py's sweeps; give the value 0 in one of them for the
unregularised row (it shares seeds, initialisation and data with the regularised models).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from normattn_jax.train.sweep import regularization_table  # noqa: E402

if __name__ == "__main__":
  if len(sys.argv) < 2:
    sys.exit(__doc__.strip())
  summaries = []
  for workdir in sys.argv[1:]:
    with open(os.path.join(workdir, "summary.json")) as f:
      summaries.append(json.load(f))
  print(regularization_table(summaries))
