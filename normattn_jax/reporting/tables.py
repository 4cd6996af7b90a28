"""Markdown tables of finished sweeps, from their ``summary.json``."""
from __future__ import annotations

from normattn_jax.sweep.config import PAPER_ARCHS

REGULARIZERS = {"train.dropout": "with dropout", "train.l2": "with L2"}


def regularization_scores(summaries) -> tuple[list[str], dict]:
  """The entries of the NAP paper's Tables 2-4, from regularisation sweeps.

  Per arch, the best mean train and validation accuracy unregularised (a swept value of 0) and
  with each regulariser (its best nonzero value, where the paper gives the value's rank).

  Args:
    summaries: ``summary.json`` trees of sweeps whose ``sweep.name`` is ``train.dropout`` or
      ``train.l2``.

  Returns:
    ``(archs, scores)``: the archs, the paper's first; ``(split, row) -> arch -> (best score,
    the value that gave it or None unregularised)``, split "train" or "val", row
    "unregularised" or a value of ``REGULARIZERS``.

  Raises:
    ValueError: a summary holds a point of another sweep.
  """
  table: dict = {}
  archs: set = set()
  for summary in summaries:
    for key, best in summary["best"].items():
      arch, _, point = key.partition(" ")
      name, _, value = point.partition("=")
      if name not in REGULARIZERS:
        raise ValueError(f"{key!r} is no point of a regularisation sweep {tuple(REGULARIZERS)}")
      archs.add(arch)
      row = "unregularised" if float(value) == 0 else REGULARIZERS[name]
      for split in ("train", "val"):
        score = best[f"{split}_acc"]
        cell = table.setdefault((split, row), {})
        if score is not None and (arch not in cell or score > cell[arch][0]):
          cell[arch] = (score, None if row == "unregularised" else float(value))
  order = list(PAPER_ARCHS)  # the paper's columns first
  return sorted(archs, key=lambda a: (order.index(a) if a in order else len(order), a)), table


def regularization_table(summaries) -> str:
  """The NAP paper's Tables 2-4 as markdown (``regularization_scores``): per arch its best
  score, the value that gave it in brackets.

  Args:
    summaries: as ``regularization_scores``.

  Returns:
    The table, one markdown row per line, the paper's architectures first.
  """
  archs, table = regularization_scores(summaries)
  lines = ["| | " + " | ".join(archs) + " |", "|---" * (len(archs) + 1) + "|"]
  for split, label in (("train", "train"), ("val", "validation")):
    for row in ("unregularised", *REGULARIZERS.values()):
      cells = table.get((split, row), {})
      if cells:
        lines.append(f"| {label}, {row} | " + " | ".join(
            _regularized(*cells[a]) if a in cells else "-" for a in archs) + " |")
  return "\n".join(lines)


def _regularized(score: float, value) -> str:
  """A regularisation table's entry: the score (%), the value behind it in brackets."""
  return f"{100 * score:.1f}" + ("" if value is None else f" ({value:g})")


def finetuning_tables(summaries: dict) -> str:
  """Fine-tuning runs side by side (the DNAS paper's Table 2 shape), one table per task: runs
  of different tasks score on different dev sets (and metrics), so no row sits beside another
  task's. Per run, the best learning rate's mean +- standard error over the seeds of every
  metric, with min and max.

  Args:
    summaries: run name -> the run's ``summary.json`` tree (``finetune.train.summarise``), in
      the order of the rows; the tables follow the order in which tasks first appear.

  Returns:
    Markdown: per task a heading with its description, then its table.
  """
  by_task: dict = {}
  for name, summary in summaries.items():
    by_task.setdefault(summary["task"], []).append((name, summary))
  blocks = []
  for task, runs in by_task.items():
    first = runs[0][1]
    metrics = first["metrics"]
    lines = [f"### {task}: {first.get('task_description', '')}".rstrip(": "), "",
             "| task | run | " + " | ".join(f"dev {m} (%)" for m in metrics)
             + " | best lr | seeds |", "|---" * (len(metrics) + 4) + "|"]
    lines += [_finetuning_row(task, name, summary, metrics) for name, summary in runs]
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks)


def _finetuning_row(task: str, name: str, summary: dict, metrics) -> str:
  """One run's row: its best learning rate's statistics per metric of its task."""
  best = summary["best"]
  if best is None:
    return f"| {task} | {name} | all diverged | | |"
  cells = []
  for metric in metrics:
    s = best[metric]
    cells.append(f"{100 * s['mean']:.1f} +- {100 * s['std_error']:.1f} "
                 f"({100 * s['min']:.1f}-{100 * s['max']:.1f})")
  return (f"| {task} | {name} | " + " | ".join(cells) + f" | {best['learning_rate']:g} | "
          f"{best[summary['metric']]['seeds']} |")
