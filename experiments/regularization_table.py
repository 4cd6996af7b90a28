"""The NAP paper's regularisation tables (Tables 2-4) from finished sweeps, as markdown:

  python experiments/regularization_table.py results/<l2 run> results/<dropout run>

Each run is one of configs/regularization.py's sweeps; give the value 0 in one of them for the
unregularised row (it shares seeds, initialisation and data with the regularised models).
"""
import json
import os

from absl import app

from normattn_jax.reporting.tables import regularization_table


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdirs of finished regularisation sweeps")
  summaries = []
  for workdir in workdirs:
    with open(os.path.join(workdir, "summary.json")) as f:
      summaries.append(json.load(f))
  print(regularization_table(summaries))


if __name__ == "__main__":
  app.run(main)
