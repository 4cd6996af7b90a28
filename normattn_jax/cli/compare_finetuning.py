"""Compare fine-tuning runs side by side (the DNAS paper's Table 2 shape), one table per task:
per run, the best learning rate's mean +- standard error over the seeds of every metric, with
min and max.

  normattn-compare-finetuning --workdirs runs/finetune_genre/softmax,\
runs/finetune_genre/dnas,runs/finetune_genre/hnas --output results/finetune_genre

Reads each workdir's summary.json; writes OUTPUT/comparison.json and OUTPUT/comparison.md.
"""
import json
import os

from absl import app, flags

from normattn_jax.reporting.tables import finetuning_tables
from normattn_jax.train.checkpoint import finished_summary
from normattn_jax.cli.command import parse_flags

_WORKDIRS = flags.DEFINE_list("workdirs", None, "Finished fine-tuning workdirs.")
_OUTPUT = flags.DEFINE_string("output", None, "Folder for comparison.json and comparison.md.")
flags.mark_flags_as_required(["workdirs", "output"])


def _main(argv):
  del argv
  summaries, named = {}, {}
  for workdir in _WORKDIRS.value:
    name = os.path.basename(os.path.normpath(workdir))  # the run's label in the tables
    if name in named:
      raise app.UsageError(f"--workdirs: {named[name]} and {workdir} are both named {name!r}, "
                           "which labels a run in the tables: give runs whose folders' names "
                           "differ")
    named[name] = workdir
    try:
      summaries[name] = finished_summary(workdir)
    except (OSError, ValueError) as err:
      raise app.UsageError(str(err)) from None
  tables = finetuning_tables(summaries)
  os.makedirs(_OUTPUT.value, exist_ok=True)
  with open(os.path.join(_OUTPUT.value, "comparison.json"), "w") as f:
    json.dump(summaries, f, indent=2)
  with open(os.path.join(_OUTPUT.value, "comparison.md"), "w") as f:
    f.write(tables + "\n")
  print(tables)


def main():
  """The console script ``normattn-compare-finetuning``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
