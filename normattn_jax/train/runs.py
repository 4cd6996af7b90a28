"""Every kind of run (``train.kinds``) goes through one driver, written once: validate the config,
open its workdir (resume it, refuse another config's, or return a finished run's summary), train
the kind's grid jobs within one ``Budget``, summarise, and on the chief alone write the kind's
files and then, last, its summary (``summary.json``, which marks a finished run). A stopped
budget raises ``driver.Interrupted`` out of here; the command line (``cli.run_command``) turns it
into its exit code, in that one place.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import ml_collections

from normattn_jax.train import kinds, multihost
from normattn_jax.train.checkpoint import open_workdir, releases_workdir, write_json
from normattn_jax.train.driver import Budget


@dataclasses.dataclass(frozen=True)
class RunContext:
  """What a kind's ``train`` gets besides its config: where, within what budget, and how loud."""
  workdir: str
  budget: Budget
  show_progress: bool = True
  tensorboard: bool = True
  log: Callable[[str], None] = print

  def path(self, *parts: str) -> str:
    """A path inside the workdir."""
    return os.path.join(self.workdir, *parts)


def prepare(config: ml_collections.ConfigDict) -> kinds.RunKind:
  """The config's kind, once the config passed its kind's rules: every check that needs no
  workdir, before anything is written or compiled.

  Raises:
    ValueError: naming the field and its value.
  """
  kind = kinds.kind_of(config)
  if kind.train is None:
    raise ValueError(f"config.kind={kind.name!r}: this kind of run has its own entry point, not "
                     f"the driver")
  kind.validate(config)
  return kind


def run(config: ml_collections.ConfigDict, workdir: str, *, afresh: bool = False,
        budget: Optional[Budget] = None, show_progress: bool = True, tensorboard: bool = True,
        log: Callable[[str], None] = print) -> dict:
  """Run (or resume) the config's kind of run in ``workdir`` and return its summary.

  Args:
    config: a config naming its kind (``config.kind``), e.g. ``normattn_jax/configs/demo.py``'s.
    workdir: the run's folder; a finished run of this config returns its summary untouched, one
      of another config is refused (``WorkdirError``) unless ``afresh`` moves it aside.
    afresh: move an existing workdir aside and start anew.
    budget: the chunks and/or minutes this call may run (``Budget``); None: no limit.
    show_progress: show a progress bar.
    tensorboard: write TensorBoard scalars besides ``history.jsonl``.
    log: where progress lines go.

  Returns:
    The summary, as ``summary.json`` holds it.

  Raises:
    ValueError: for a bad config field, before anything is written.
    Interrupted: when the budget stops the run; the same call resumes it.
  """
  return run_checked(prepare(config), config, workdir, afresh=afresh, budget=budget,
                     show_progress=show_progress, tensorboard=tensorboard, log=log)


@releases_workdir
def run_checked(kind: kinds.RunKind, config: ml_collections.ConfigDict, workdir: str, *,
                afresh: bool = False, budget: Optional[Budget] = None,
                show_progress: bool = True, tensorboard: bool = True,
                log: Callable[[str], None] = print) -> dict:
  """``run`` of a config that already passed ``kind``'s rules: a run that another run builds
  from its own checked config (a report card's sweeps, checked with the card at its entry), so
  that no config is checked twice on the way down.

  Args:
    kind: the config's kind (``prepare``'s result).
    config, workdir, afresh, budget, show_progress, tensorboard, log: as in ``run``.

  Returns:
    The summary, as ``summary.json`` holds it.
  """
  owner = config if kind.workdir_config is None else kind.workdir_config(config, workdir)
  finished = open_workdir(workdir, owner, kind, afresh=afresh)
  if finished is not None:
    return finished
  context = RunContext(workdir, budget or Budget(), show_progress, tensorboard, log)
  results = kind.train(config, context)
  summary = kind.summarise(config, results)
  if multihost.is_chief():  # on several hosts, one writes the files
    if kind.save is not None:
      kind.save(workdir, config, results)
    write_json(os.path.join(workdir, kind.summary_file), summary, **kind.summary_format)  # last
  return summary
