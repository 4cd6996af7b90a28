"""The NAP paper's regularisation tables (Tables 2-4) from finished sweeps, as markdown:

  python experiments/regularization_table.py results/<l2 run> results/<dropout run>

Each run is one of configs/regularization.py's sweeps; give the value 0 in one of them for the
unregularised row (it shares seeds, initialisation and data with the regularised models).
"""
from absl import app

from normattn_jax.reporting.tables import regularization_table
from normattn_jax.train.checkpoint import finished_summary


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdirs of finished regularisation sweeps")
  try:
    summaries = [finished_summary(workdir) for workdir in workdirs]
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  print(regularization_table(summaries))


if __name__ == "__main__":
  app.run(main)
