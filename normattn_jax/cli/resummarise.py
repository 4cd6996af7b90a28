"""Score finished sweeps again, no training: normattn-resummarise results/<run> ...

Rewrites each run's summary.json and figures from its config.json and metrics.npz, e.g. after a
change in how results are scored. A run stored before sweep.values was renamed sweep.grid reads
as one stored after.
"""
from absl import app

from normattn_jax.reporting import figures
from normattn_jax.sweep.scoring import best_lines
from normattn_jax.sweep.train import resummarise


def _main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdir of at least one finished sweep")
  for workdir in workdirs:
    summary = resummarise(workdir)
    figures.draw_finished_sweep(workdir)
    print(workdir)
    print("\n".join(best_lines(summary)))


def main():
  """The console script ``normattn-resummarise``."""
  app.run(_main)


if __name__ == "__main__":
  main()
