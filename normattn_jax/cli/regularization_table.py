"""The NAP paper's regularisation tables (Tables 2-4) from finished sweeps, as markdown:

  normattn-regularization-table results/<l2 run> results/<dropout run>

Each run is one of the regularization config's sweeps; give the value 0 in one of them for the
unregularised row (it shares seeds, initialisation and data with the regularised models).
"""
from absl import app

from normattn_jax.reporting.tables import regularization_table
from normattn_jax.train.checkpoint import finished_summary


def _main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdirs of finished regularisation sweeps")
  try:
    summaries = [finished_summary(workdir) for workdir in workdirs]
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  print(regularization_table(summaries))


def main():
  """The console script ``normattn-regularization-table``."""
  app.run(_main)


if __name__ == "__main__":
  main()
