"""What is drawn of each kind of run's finished workdir: one ``Drawer`` per kind's name, in one
registry, called by the command line (on the chief) after a run. The kinds of run compute and
store numbers and never import matplotlib; a plugin kind registers its own drawer here
(``register(Drawer(name, draw))``) as it registers its kind.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

from normattn_jax.registry import Registry


@dataclasses.dataclass(frozen=True)
class Drawer:
  """The figures of one kind of run.

  - ``name``: the kind's name (``train.kinds.RunKind.name``).
  - ``draw(workdir, summary)``: writes the kind's figures (and tables) into ``workdir``.
  """
  name: str
  draw: Callable[[str, dict], None]


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


for _drawer in (Drawer("sweep", _sweep), Drawer("finetuning", _finetuning),
                Drawer("causal_lm", _causal_lm), Drawer("majority", _majority),
                Drawer("report_card", _report_card)):
  register(_drawer)
