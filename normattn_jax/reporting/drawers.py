"""What is drawn of each kind of run's finished workdir: one ``Drawer`` per kind's name, in one
registry, called by the command line (on the chief) after a run. The kinds of run compute and
store numbers and never import matplotlib; a plugin kind registers its own drawer here
(``register(Drawer(name, draw))``) as it registers its kind.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Callable

from normattn_jax.registry import Registry


@dataclasses.dataclass(frozen=True)
class Drawer:
  """The figures of one kind of run.

  - ``name``: the kind's name (``train.kinds.RunKind.name``).
  - ``draw(workdir, summary)``: writes the kind's figures (and tables) into ``workdir``.
  - ``files(workdir, summary) -> names``: the files ``draw`` writes there. Of a run found
    finished, only the missing ones are drawn again (``draw_missing``), the others left as
    they are; none declared: none redrawn.
  """
  name: str
  draw: Callable[[str, dict], None]
  files: Callable[[str, dict], tuple] = lambda workdir, summary: ()


DRAWERS: Registry[Drawer] = Registry("drawer", Drawer)


def register(drawer: Drawer, *, replace: bool = False) -> Drawer:
  """Make ``drawer`` the figures of the kind it names; returns it."""
  return DRAWERS.register(drawer, replace=replace)


def draw(kind: str, workdir: str, summary: dict) -> bool:
  """Draw the figures of a finished run of ``kind`` into its workdir.

  Args:
    kind: the kind's name.
    workdir: the run's folder.
    summary: its summary (``summary.json``).

  Returns:
    Whether the kind has a drawer (a kind without one draws nothing).
  """
  if kind not in DRAWERS:
    return False
  DRAWERS.get(kind).draw(workdir, summary)
  return True


def draw_missing(kind: str, workdir: str, summary: dict) -> list:
  """Draw again the figures a finished run of ``kind`` lacks (its drawer's ``files``), leaving
  the others as they are: the drawer draws into a scratch folder beside the workdir (so that
  the parent's note reads as the workdir's) that links the workdir's other files, and only the
  missing figures are copied in.

  Args:
    kind: the kind's name.
    workdir: the finished run's folder (writable).
    summary: its summary.

  Returns:
    The names of the figures drawn.
  """
  if kind not in DRAWERS:
    return []
  drawer = DRAWERS.get(kind)
  names = tuple(drawer.files(workdir, summary))
  missing = [name for name in names if not os.path.exists(os.path.join(workdir, name))]
  if not missing:
    return []
  parent = os.path.dirname(os.path.abspath(workdir))  # whose note the figures read too
  with tempfile.TemporaryDirectory(prefix=".redraw-",
                                   dir=parent if os.access(parent, os.W_OK) else None) as scratch:
    for entry in os.listdir(workdir):
      if entry not in names:
        os.symlink(os.path.join(workdir, entry), os.path.join(scratch, entry))
    drawer.draw(scratch, summary)
    drawn = [name for name in missing if os.path.isfile(os.path.join(scratch, name))]
    for name in drawn:
      partial = os.path.join(workdir, name + ".partial")
      shutil.copyfile(os.path.join(scratch, name), partial)
      os.replace(partial, os.path.join(workdir, name))
  return drawn


def _sweep(workdir: str, summary: dict) -> None:
  from normattn_jax.reporting import figures
  figures.draw_finished_sweep(workdir)


def _finetuning(workdir: str, summary: dict) -> None:
  from normattn_jax.reporting import training_figures
  training_figures.finetuning_curves(summary, os.path.join(workdir, "metrics.npz"),
                                     os.path.join(workdir, "curves.png"))


def _causal_lm(workdir: str, summary: dict) -> None:
  from normattn_jax.analysis import causal_lm_keys
  from normattn_jax.reporting import analysis_figures
  causal_lm_keys.write_table(summary, workdir)
  analysis_figures.causal_lm_loss(summary, os.path.join(workdir, "train_loss.png"))


def _majority(workdir: str, summary: dict) -> None:
  from normattn_jax.analysis import majority
  from normattn_jax.reporting import analysis_figures
  with open(os.path.join(workdir, "config.json")) as f:
    num_seeds = json.load(f)["num_seeds"]
  analysis_figures.majority(majority.read_curves(workdir), num_seeds,
                            os.path.join(workdir, "majority.png"))


def _report_card(workdir: str, summary: dict) -> None:
  from normattn_jax.card import train as card
  from normattn_jax.reporting import figures
  report = card.finished_report(workdir)
  figures.card_accuracy(report, os.path.join(workdir, "accuracy.png"))
  for folder in card.sweep_folders(workdir, report):
    if os.path.exists(os.path.join(folder, "summary.json")):
      figures.draw_finished_sweep(folder)


def _sweep_files(workdir: str, summary: dict) -> tuple:
  from normattn_jax.reporting import figures
  from normattn_jax.sweep import artifacts
  return figures.sweep_figure_files(artifacts.read_config(workdir))


for _drawer in (Drawer("sweep", _sweep, _sweep_files),
                Drawer("finetuning", _finetuning, lambda workdir, summary: ("curves.png",)),
                Drawer("causal_lm", _causal_lm,
                       lambda workdir, summary: ("table1.md", "train_loss.png")),
                Drawer("majority", _majority, lambda workdir, summary: ("majority.png",)),
                Drawer("report_card", _report_card)):
  register(_drawer)
