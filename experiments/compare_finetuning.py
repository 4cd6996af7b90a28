"""Compare fine-tuning runs side by side (the DNAS paper's Table 2 shape): per run, the best
learning rate's mean +- standard error over the seeds of every metric, with min and max.

  python experiments/compare_finetuning.py --workdirs runs/finetune_genre/softmax,\
runs/finetune_genre/dnas,runs/finetune_genre/hnas --output results/finetune_genre

Reads each workdir's summary.json; writes OUTPUT/comparison.json and OUTPUT/comparison.md.
"""
import json
import os

from absl import app, flags

_WORKDIRS = flags.DEFINE_list("workdirs", None, "Finished fine-tuning workdirs.")
_OUTPUT = flags.DEFINE_string("output", None, "Folder for comparison.json and comparison.md.")
flags.mark_flags_as_required(["workdirs", "output"])


def row(name: str, summary: dict) -> str:
  """One markdown row: the best learning rate's statistics per metric."""
  best = summary["best"]
  if best is None:
    return f"| {name} | all diverged |"
  cells = []
  for metric in summary["metrics"]:
    s = best[metric]
    cells.append(f"{100 * s['mean']:.1f} +- {100 * s['std_error']:.1f} "
                 f"({100 * s['min']:.1f}-{100 * s['max']:.1f})")
  return (f"| {name} | " + " | ".join(cells) + f" | {best['learning_rate']:g} | "
          f"{best[summary['metric']]['seeds']} |")


def main(argv):
  del argv
  summaries = {}
  for workdir in _WORKDIRS.value:
    with open(os.path.join(workdir, "summary.json")) as f:
      summaries[os.path.basename(os.path.normpath(workdir))] = json.load(f)
  first = next(iter(summaries.values()))
  header = ("| run | " + " | ".join(f"dev {m} (%)" for m in first["metrics"])
            + " | best lr | seeds |")
  lines = [header, "|---" * (len(first["metrics"]) + 3) + "|"]
  lines += [row(name, summary) for name, summary in summaries.items()]
  os.makedirs(_OUTPUT.value, exist_ok=True)
  with open(os.path.join(_OUTPUT.value, "comparison.json"), "w") as f:
    json.dump(summaries, f, indent=2)
  with open(os.path.join(_OUTPUT.value, "comparison.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  app.run(main)
