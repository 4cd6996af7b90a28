"""Figures of a sweep: the NAP paper's RGB pixel plots and learning curves with min-max bands,
each with its provenance along its bottom (``reporting.provenance``: the experiment, the scale
from the sweep's config, the seeds, the machine)."""
from __future__ import annotations

import json
import os

from normattn_jax._extras import require

matplotlib = require("matplotlib", "experiments")
matplotlib.use("Agg")
import matplotlib.patheffects as path_effects  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax import tasks  # noqa: E402
from normattn_jax.reporting import provenance as provenance_lib  # noqa: E402
from normattn_jax.reporting.provenance import FIGURE_VERSION, figure_version  # noqa: E402, F401
from normattn_jax.sweep import artifacts  # noqa: E402
from normattn_jax.sweep.plan import SweepPlan  # noqa: E402

# What a pixel's colour means, under every pixel plot (the NAP paper's key).
PIXEL_KEY = ("R, G, B = min, mean, max over seeds of the accuracy at each evaluation, each at its "
             "best over training: the brighter, the better.\n"
             "x = the panel's best mean (G); its title gives that mean and its cell.")
HATCH_KEY = ("Hatched: a cell this side did not run (ours), or whose file is not in the mirror "
             "used here (theirs).")
# The x-axis of a sweep without a swept value: one column, the config's one setting.
ONE_COLUMN_LABEL = "one setting (no sweep)"


def sweep_axis(plan: SweepPlan):
  """The x-axis of the pixel plots: the swept values, or one column.

  Args:
    plan: the sweep's plan.

  Returns:
    ``(sweep.name, swept values as floats)``, or ``("", [None])`` without a sweep.
  """
  if plan.swept_field:
    return plan.swept_field, list(plan.swept_values)
  return "", [None]


def cell_grid(plan: SweepPlan, summary, arch, metric, stat):
  """``[learning rates, swept values]`` array of one statistic from ``summary["cells"]``.

  Args:
    plan: the sweep's plan.
    summary: its ``summary.json`` tree (``scoring.summarise``).
    arch: the architecture's name.
    metric: the metric, e.g. "val_acc".
    stat: the statistic over seeds, e.g. "min", "mean" or "max".

  Returns:
    float ``[len(learning_rates), swept values]``; NaN where no cell (or no value) is.
  """
  name, xs = sweep_axis(plan)
  lrs = list(plan.axis.learning_rates)
  grid = np.full((len(lrs), len(xs)), np.nan)
  for cell in summary["cells"]:
    if cell["arch"] != arch or metric not in cell["metrics"]:
      continue
    x = xs.index(cell["params"][name]) if name else 0
    value = cell["metrics"][metric][stat]
    grid[lrs.index(cell["learning_rate"]), x] = np.nan if value is None else value
  return grid


def pixel_image(channels):
  """Stack three ``[lr, x]`` grids in [0, 1] as an RGB image (NaN -> black).

  Args:
    channels: three ``[lr, x]`` arrays, R, G and B.

  Returns:
    float ``[lr, x, 3]`` in [0, 1].
  """
  return np.clip(np.nan_to_num(np.stack(channels, axis=-1), nan=0.0), 0.0, 1.0)


def _draw_pixels(ax, image, title, learning_rates, xs, xlabel, cross=None):
  """One pixel plot: rows the learning rates, columns ``xs``, a cross at ``cross``."""
  ax.imshow(image, aspect="auto", interpolation="nearest")
  if cross is not None:
    ax.plot(cross[1], cross[0], "x", color="black", markersize=9, markeredgewidth=2,
            path_effects=[path_effects.withStroke(linewidth=4, foreground="white")])
  ax.set_title(title, fontsize=9)
  ax.set_yticks(range(len(learning_rates)))
  ax.set_yticklabels([f"{lr:.1e}" for lr in learning_rates], fontsize=6)
  ax.set_xticks(range(len(xs)))
  ax.set_xticklabels(["" if x is None else f"{x:g}" for x in xs], fontsize=6)
  ax.set_xlabel(xlabel or ONE_COLUMN_LABEL)


def _pixel_axes(ax, plan, image, title, cross=None):
  name, xs = sweep_axis(plan)
  _draw_pixels(ax, image, title, plan.axis.learning_rates, xs,
               name.split(".")[-1] if name else "", cross)


def sweep_scale(plan: SweepPlan) -> str:
  """"case_distinction task, N = 32, d = 16, 32, 800 steps, batch 32": a sweep's scale, the
  swept values in place of the setting they sweep."""
  config = plan.config
  field, values = sweep_axis(plan)
  listed = lambda xs: ", ".join(f"{x:g}" for x in xs)
  setting = lambda name, label, value: (f"{label} = {listed(values)}" if field == name
                                        else f"{label} = {value}")
  parts = [setting("task.seq_len", "N", config.task.seq_len),
           setting("model.d_model", "d", config.model.d_model)]
  if field not in ("", "task.seq_len", "model.d_model", "train.batch_size"):
    parts.append(f"{field.split('.')[-1]} = {listed(values)}")
  steps = sorted({int(c.train.num_steps) for c in plan.point_configs.values()})
  parts.append(f"{steps[0]} steps" if len(steps) == 1 else f"{steps[0]}-{steps[-1]} steps")
  parts.append(setting("train.batch_size", "batch", config.train.batch_size).replace(" =", ""))
  output = f" ({config.task.output} output)" if config.task.get("output") else ""
  return f"{config.task.name} task{output}, " + ", ".join(parts)


def sweep_provenance(plan: SweepPlan, path: str) -> provenance_lib.Provenance:
  """A sweep figure's provenance: its scale and seeds from the sweep's config, the experiment
  and machine from its workdir (``provenance.of_figure``)."""
  field = plan.swept_field
  return provenance_lib.of_figure(
      path, scale=sweep_scale(plan), seeds=provenance_lib.seeds_text(plan.config.num_seeds),
      experiment=f"a {plan.config.task.name} sweep" + (f" over {field}" if field else ""))


def lengths(plan: SweepPlan) -> tuple[str, str]:
  """Where the rows were measured: ``("N = 32", "N = 16")``, or, when the columns are the
  sequence length, ``("the column's N", "N/2")``."""
  task = plan.config.task
  validation_length = tasks.get(task.name).validation_length
  if plan.swept_field == "task.seq_len":
    n = int(plan.swept_values[0])
    ratio = validation_length(n) / n
    return "the column's N", {1: "N", 0.5: "N/2", 2: "2N"}.get(ratio, f"{ratio:g}N")
  return f"N = {task.seq_len}", f"N = {validation_length(int(task.seq_len))}"


def cell_label(plan: SweepPlan, cell) -> str:
  """``"lr 2.2e-04, d_model=128"``: a cell (row, column) of a sweep's pixel plots."""
  name, xs = sweep_axis(plan)
  return _cell_text(plan.axis.learning_rates, name, xs, cell)


def _cell_text(learning_rates, field: str, values, cell) -> str:
  """A cell (row, column) of pixel plots whose rows are ``learning_rates`` and columns the
  ``values`` of ``field`` (none without a field)."""
  text = f"lr {learning_rates[cell[0]]:.1e}"
  return text + (f", {field.split('.')[-1]}={values[cell[1]]:g}" if field else "")


def case_key(groups) -> str:
  """The case figure's key, from its first row's metrics (``group_image``): e.g. "R, G, B =
  argmin, first, argmax accuracy, each the mean over seeds at its best over training ..."."""
  names = [metric.rsplit("_", 1)[-1] for metric in groups[0].metrics]
  if len(names) == 3:
    return (f"R, G, B = {', '.join(names)} accuracy, each the mean over seeds at its best over "
            "training: white = all three learned.\n"
            "x = the cell whose weakest case is highest; its title gives that case's accuracy "
            "and the cell.")
  return (f"grey = the mean of {', '.join(names)} accuracy, each the mean over seeds at its "
          "best over training.")




def _best_mean(image):
  """(row, column) of the best mean (G) of a pixel image and its value, or (None, None)."""
  mean = image[..., 1]
  if not np.isfinite(mean).any():
    return None, None
  cross = np.unravel_index(np.nanargmax(mean), mean.shape)
  return cross, mean[cross]


def accuracy_figure(plan: SweepPlan, summary, path):
  """Rows train / val accuracy; per arch R/G/B = min/mean/max over seeds (said in a key along the
  bottom), a cross at the best mean, and the best mean in the title (the paper's Fig. 3 style).

  Args:
    plan: the sweep's plan.
    summary: its ``summary.json`` tree (``scoring.summarise``).
    path: the image file to write.
  """
  archs = list(plan.archs)
  train_at, val_at = lengths(plan)
  rows = [("train_acc", "train", f"training accuracy at {train_at}"),
          ("val_acc", "val", f"validation accuracy at {val_at}")]
  fig, axes = plt.subplots(len(rows), len(archs), figsize=(2.4 * len(archs) + 1, 2.8 * len(rows)),
                           squeeze=False)
  for r, (metric, label, measured) in enumerate(rows):
    for a, arch in enumerate(archs):
      grids = [cell_grid(plan, summary, arch, metric, s) for s in ("min", "mean", "max")]
      cross, best = _best_mean(np.stack(grids, axis=-1))
      title = f"{arch} {label}: " + ("n/a" if best is None else
                                     f"{best:.1%}\nat {cell_label(plan, cross)}")
      _pixel_axes(axes[r, a], plan, pixel_image(grids), title, cross)
    axes[r, 0].set_ylabel(f"{measured}\nlearning rate", fontsize=8)
  provenance_lib.save(fig, path, sweep_provenance(plan, path), key=PIXEL_KEY)


def group_image(plan: SweepPlan, summary, arch, group):
  """A metric group's pixel image: its three metrics' means as R/G/B, or, for a group of another
  size, the mean of its metrics' means in grey.

  Args:
    plan: the sweep's plan.
    summary: its ``summary.json`` tree (``scoring.summarise``).
    arch: the architecture's name.
    group: a ``MetricGroup``.

  Returns:
    float ``[lr, x, 3]`` in [0, 1].
  """
  grids = [cell_grid(plan, summary, arch, metric, "mean") for metric in group.metrics]
  if len(grids) != 3:
    grids = [np.mean(grids, axis=0)] * 3
  return pixel_image(grids)


def case_figure(plan: SweepPlan, summary, path, groups):
  """Accuracy per case: a row per metric group of the task (``Task.metric_groups``, e.g. the
  case task's argmin / first / argmax accuracy at N and at N/2), a column per arch; each pixel
  the group's mean accuracies as R/G/B (``group_image``).

  Args:
    plan: the sweep's plan.
    summary: its ``summary.json`` tree (``scoring.summarise``).
    path: the image file to write.
    groups: the task's ``MetricGroup`` objects, one row each.
  """
  archs = list(plan.archs)
  measured = dict(zip(("training", "validation"), lengths(plan)))
  fig, axes = plt.subplots(len(groups), len(archs),
                           figsize=(2.4 * len(archs) + 1, 2.8 * len(groups)), squeeze=False)
  for r, group in enumerate(groups):
    for a, arch in enumerate(archs):
      image = group_image(plan, summary, arch, group)
      cross, weakest = weakest_case(image) if len(group.metrics) == 3 else (None, None)
      title = f"{arch} cases {group.label}" + (
          "" if weakest is None else f": weakest {weakest:.1%}\nat {cell_label(plan, cross)}")
      _pixel_axes(axes[r, a], plan, image, title, cross)
    length = list(measured.items())[r] if r < len(measured) else ("", "")
    axes[r, 0].set_ylabel(f"cases at the {length[0]} length ({length[1]})\nlearning rate"
                          if length[0] else "learning rate", fontsize=8)
  provenance_lib.save(fig, path, sweep_provenance(plan, path),
                      key=case_key(groups))


def weakest_case(image):
  """(row, column) of the cell whose weakest channel (case) is highest, and that value; (None,
  None) where no cell has a value. The NAP paper's "learns all three cases" reads a white pixel:
  every channel bright."""
  weakest = np.min(image, axis=-1)
  if not np.isfinite(weakest).any() or not np.nanmax(weakest) > 0:
    return None, None
  cell = np.unravel_index(np.nanargmax(weakest), weakest.shape)
  return cell, float(weakest[cell])


def pixels_beside_authors(grids, path, measured=("the training length", "the validation length")):
  """The paper's pixel plots of the authors' sweep beside ours on one grid
  (``seeds.pixel_grids``): a row per arch, columns the authors' and our training accuracy, then
  the same for validation; cells one side did not run are hatched, a cross marks the best mean.

  Args:
    grids: a ``seeds.PixelGrids``.
    path: the image file to write.
    measured: where training and validation accuracy were measured, e.g. ``lengths(plan)`` of
      our runs: ``("N = 128", "N = 64")``.
  """
  columns = [(metric, source) for metric in ("train_acc", "val_acc")
             for source in ("authors", "ours")]
  at = dict(zip(("train_acc", "val_acc"), measured))
  archs = grids.archs
  fig, axes = plt.subplots(len(archs), len(columns),
                           figsize=(2.6 * len(columns) + 1, 2.6 * len(archs)), squeeze=False)
  for r, arch in enumerate(archs):
    for c, (metric, source) in enumerate(columns):
      image = grids.images[(arch, source, metric)]
      cross, best = _best_mean(image)
      label = (f"{arch} {metric.split('_')[0]} ({at[metric]}), "
               f"{'theirs' if source == 'authors' else 'ours'}")
      ax = axes[r, c]
      ax.set_facecolor("white")
      ax.patch.set_hatch("////")
      ax.patch.set_edgecolor("0.75")
      rgba = np.concatenate([pixel_image(np.moveaxis(image, -1, 0)),
                             np.isfinite(image).all(-1, keepdims=True)], axis=-1)
      missing = (":\nnot in the mirror used here" if source == "authors" else ":\nnot run")
      where = ("" if best is None else
               _cell_text(grids.learning_rates, grids.field, grids.values, cross))
      _draw_pixels(ax, rgba, label + (missing if best is None else f":\n{best:.1%} at {where}"),
                   grids.learning_rates, grids.values, grids.field.split(".")[-1], cross)
    axes[r, 0].set_ylabel("learning rate")
  provenance_lib.save(fig, path, provenance_lib.of_figure(path),
                      key=PIXEL_KEY + "\n" + HATCH_KEY)


def curve_colours(count: int) -> tuple[str, ...]:
  """The learning curves' colours: three match the pixel images' R/G/B, others cycle.

  Args:
    count: the number of curves.

  Returns:
    ``count`` matplotlib colour names.
  """
  return (("tab:red", "tab:green", "tab:blue") if count == 3 else
           tuple(f"C{i}" for i in range(count)))


def learning_curves_figure(plan: SweepPlan, summary, metrics_path, path, groups=()):
  """Per arch, at its best learning rate (first swept value): mean curves over seeds with
  min-max bands; a second row of the first metric group's curves when there is one, e.g. the
  case accuracies at N (the paper's Fig. 10-12).

  Args:
    plan: the sweep's plan.
    summary: its ``summary.json`` tree (``scoring.summarise``).
    metrics_path: the sweep's ``metrics.npz``.
    path: the image file to write.
    groups: the task's ``MetricGroup`` objects; only the first is drawn.
  """
  data = np.load(metrics_path)
  first = plan.points[0]
  steps = artifacts.eval_steps(plan.point_config(first))  # a point's own, where its steps scale
  archs = list(plan.archs)
  rows = [(("train_acc", "tab:blue"), ("val_acc", "tab:orange"))]
  if groups:
    rows.append(tuple(zip(groups[0].metrics, curve_colours(len(groups[0].metrics)))))
  fig, axes = plt.subplots(len(rows), len(archs), figsize=(2.6 * len(archs), 2.6 * len(rows)),
                           squeeze=False, sharey=True)
  axis = plan.axis
  for a, arch in enumerate(archs):
    prefix = plan.grid(arch, first).name
    mean = cell_grid(plan, summary, arch, "val_acc", "mean")[:, 0]
    if not np.isfinite(mean).any():
      continue
    best = int(np.nanargmax(mean))
    rows_of_cell = axis.rows(best, 0)
    for r, curves_of_row in enumerate(rows):
      ax = axes[r, a]
      for metric, colour in curves_of_row:
        curves = axis.flatten(data[f"{prefix}/{metric}"])[:, rows_of_cell]
        ax.plot(steps, curves.mean(-1), color=colour, label=metric)
        ax.fill_between(steps, curves.min(-1), curves.max(-1), color=colour, alpha=0.25)
      ax.set_xlabel("step")
    axes[0, a].set_title(f"{arch}, lr {axis.learning_rates[best]:.1e}", fontsize=9)
  for r in range(len(rows)):
    axes[r, 0].set_ylabel("accuracy")
    axes[r, 0].legend(fontsize=6)
  provenance_lib.save(fig, path, sweep_provenance(plan, path))


def draw_sweep(plan: SweepPlan, summary, metrics_path, workdir):
  """Draw a sweep's figures into its workdir: accuracy.png, learning_curves.png and, for a task
  with metric groups (``Task.metric_groups``), case_accuracy.png.

  Args:
    plan: the sweep's plan.
    summary: its ``summary.json`` tree (``scoring.summarise``).
    metrics_path: its ``metrics.npz``.
    workdir: the folder the figures go to.
  """
  task = plan.config.task
  groups = tasks.get(task.name).metric_groups(task.seq_len)
  groups = groups[:2 if plan.config.eval.validation_case_sets else 1]  # those evaluated
  accuracy_figure(plan, summary, os.path.join(workdir, "accuracy.png"))
  if groups:
    case_figure(plan, summary, os.path.join(workdir, "case_accuracy.png"), groups)
  learning_curves_figure(plan, summary, metrics_path,
                         os.path.join(workdir, "learning_curves.png"), groups)


def sweep_figure_files(config) -> tuple:
  """The files ``draw_sweep`` writes for a sweep of ``config``.

  Args:
    config: the sweep's config (``config.task`` names the task).

  Returns:
    accuracy.png, case_accuracy.png where the task has metric groups, learning_curves.png.
  """
  groups = tasks.get(config.task.name).metric_groups(config.task.seq_len)
  return ("accuracy.png",) + (("case_accuracy.png",) if groups else ()) + ("learning_curves.png",)


def draw_finished_sweep(workdir: str) -> None:
  """Draw a finished sweep's figures (``draw_sweep``) from what its workdir holds: after a run,
  a rescoring or a retrained arch, whose functions write ``summary.json`` and leave the figures
  to their caller.

  Args:
    workdir: a finished sweep's workdir (``config.json``, ``metrics.npz``, ``summary.json``).
  """
  with open(os.path.join(workdir, artifacts.SUMMARY)) as f:
    summary = json.load(f)
  draw_sweep(SweepPlan.of(artifacts.read_config(workdir)), summary,
             os.path.join(workdir, artifacts.METRICS), workdir)


def median_interval(values, level: float = 0.95) -> tuple[float, float, float]:
  """``(median, low, high)``: the median of per-seed values with its distribution-free interval
  (the order statistics of a binomial test of the median, ``scipy.stats.quantile_test``)."""
  stats = require("scipy.stats", "analysis")
  v = np.asarray(values, np.float64)
  v = v[np.isfinite(v)]
  median = float(np.median(v))
  ci = stats.quantile_test(v, q=median, p=0.5).confidence_interval(level)
  low, high = (median if not np.isfinite(x) else float(x) for x in (ci.low, ci.high))
  return median, low, high


def card_accuracy(report: dict, path: str) -> None:
  """A report card's figure: per task, each arm's best accuracy per evaluation seed (dots), their
  median (bar) and its 95% distribution-free interval (``median_interval``), at the arm's
  selected learning rate; training accuracy, for the mode task validation accuracy at 2N. The
  title names the card and its scale, the strip below its provenance (the machine among it).

  Args:
    report: ``card.train.run``'s report.
    path: the image file to write.
  """
  tasks_ = list(report["tasks"])
  fig, axes = plt.subplots(1, len(tasks_), figsize=(4.2 * len(tasks_), 3.9), squeeze=False)
  names = {"card": report["name"], "softmax": "softmax\n(baseline)", "nap": "NAP\n(baseline)"}
  for ax, task in zip(axes[0], tasks_):
    metric = "val_acc" if task == "mode" else "train_acc"
    arms = report["tasks"][task]["arms"]
    colours = curve_colours(len(arms))
    for i, (label, entry) in enumerate(arms.items()):
      values = 100 * np.asarray(entry[metric], np.float64)
      median, low, high = median_interval(values)
      ax.bar(i, median, color=colours[i], alpha=0.55, width=0.6)
      ax.errorbar(i, median, yerr=[[median - low], [high - median]], color="k", capsize=4,
                  linewidth=1.2)
      jitter = np.linspace(-0.18, 0.18, values.size)
      ax.plot(i + jitter, values, "k.", markersize=3, alpha=0.7)
    ax.set_xticks(range(len(arms)), [names.get(a, a) for a in arms], fontsize=8)
    low = min(100 * np.min(e[metric]) for e in arms.values())
    ax.set_ylim(max(0.0, low - 5), 100.5)
    ax.set_ylabel("%", fontsize=8)
    ax.set_title(f"{task.replace('_', ' ')}: "
                 f"{'validation at 2N' if metric == 'val_acc' else 'training'} accuracy",
                 fontsize=9)
  s = report["sizes"]
  fig.suptitle(f"{report['normalization']}, {report['scale']} scale (N = {s['seq_len']}, "
               f"d = {s['d_model']}, {s['evaluation_seeds']} evaluation seeds)\nbars: median "
               f"with its 95% interval; dots: seeds", fontsize=9)
  provenance_lib.save(fig, path, card_provenance(report), dpi=110)


def card_provenance(report: dict) -> provenance_lib.Provenance:
  """A report card's provenance, all from its report: the tasks and sizes it ran at, its seeds
  and the machine that trained it."""
  sizes = report["sizes"]
  return provenance_lib.Provenance(
      experiment=(f"report card of {report['name']} (protocol {report['protocol']}): the NAP "
                  f"paper's {', '.join(report['tasks'])} tasks"),
      scale=(f"N = {sizes['seq_len']}, d = {sizes['d_model']}, {sizes['num_steps']} steps "
             f"({sizes['mode_steps']} on the mode task), batch {sizes['batch_size']}"),
      seeds=(f"{sizes['selection_seeds']} seeds to select a learning rate, "
             f"{sizes['evaluation_seeds']} to evaluate it"),
      machine=provenance_lib.machine_of_versions(report["machine"]))
