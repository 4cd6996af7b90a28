"""One way to log a run, shared by sweeps, pre-training and fine-tuning: a JSON-lines history
(the record a resumed run continues), TensorBoard scalars and a progress bar. Only the chief
process (index 0) writes; on the others every call is a no-op but for the returned history."""
from __future__ import annotations

import json
import numbers
import os
import sys
from typing import Iterable, Optional

import numpy as np

from normattn_jax._extras import require
from normattn_jax.train import multihost


def _plain(value):
  """JSON-ready python values from numpy/jax scalars and arrays."""
  if isinstance(value, (str, bool, type(None))):
    return value
  array = np.asarray(value)
  return array.item() if array.ndim == 0 else array.tolist()


# Where stderr is not a terminal (a log file, a pipe, a batch job), the bar's refreshes become
# lines of their own, one per LINE_SECONDS at most, instead of carriage returns over one line.
LINE_SECONDS = 30.0


class LineStream:
  """A stream for tqdm that writes each refresh of the bar as a plain line: the carriage
  returns and the padding it writes for a terminal dropped, empty writes skipped."""

  def __init__(self, stream):
    self.stream = stream

  def write(self, text: str) -> None:
    """Write the bar's text, if any, as one line."""
    line = text.replace("\r", "").rstrip()
    if line:
      self.stream.write(line + "\n")

  def flush(self) -> None:
    """Flush the stream."""
    self.stream.flush()


def bar_output(stream) -> dict:
  """tqdm's ``file`` (and refresh interval) for ``stream``: the stream itself on a terminal,
  else a ``LineStream`` that writes a line every ``LINE_SECONDS``.

  Args:
    stream: where the bar goes (``sys.stderr``).

  Returns:
    Keyword arguments of ``tqdm``.
  """
  isatty = getattr(stream, "isatty", None)
  if isatty is not None and isatty():
    return {"file": stream}
  return {"file": LineStream(stream), "mininterval": LINE_SECONDS, "ascii": True}


class RunLog:
  """History, scalars and progress of one run.

  Args:
    workdir: where ``history.jsonl`` and ``tensorboard/`` go.
    total: the progress bar's total (in ``unit``); 0 shows no bar.
    resume_from: the step the run resumes from: rows of the history after it are dropped (they
      will be logged again), rows up to it are kept.
    unit: the progress bar's unit, e.g. "step" or "model-step".
    tensorboard: write TensorBoard scalars.
    progress: show a progress bar.
  """

  def __init__(self, workdir: str, *, total: int = 0, resume_from: int = 0, unit: str = "step",
               tensorboard: bool = True, progress: bool = True):
    self.chief = multihost.is_chief()
    self.path = os.path.join(workdir, "history.jsonl")
    self._writer = self._bar = None
    if self.chief:
      self.history = [row for row in read_history(self.path) if row["step"] <= resume_from]
      partial = self.path + ".partial"  # whole or not at all, as the others may read it
      with open(partial, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in self.history)
      os.replace(partial, self.path)
    # the others read the history once the chief has cut it, before it appends to it
    multihost.sync("normattn_jax RunLog")
    if not self.chief:
      self.history = [row for row in read_history(self.path) if row["step"] <= resume_from]
      return
    if tensorboard:
      summary_writer = require("tensorboardX", "experiments").SummaryWriter
      self._writer = summary_writer(os.path.join(workdir, "tensorboard"))
    if progress and total:
      tqdm = require("tqdm", "experiments").tqdm
      self._bar = tqdm(total=total, initial=resume_from if unit == "step" else 0, unit=unit,
                       unit_scale=unit != "step", smoothing=0.1, **bar_output(sys.stderr))

  def record(self, step: int, scalars: dict, **labels) -> dict:
    """Append one row to the history and its numbers to TensorBoard.

    Args:
      step: the training step the row belongs to.
      scalars: name -> number, or a list of numbers (one TensorBoard scalar per entry).
      **labels: strings that name the row (e.g. ``split="validation"``, ``grid="nap"``); they
        prefix the TensorBoard tags.

    Returns:
      The row as stored.
    """
    row = {"step": int(step), **labels, **{k: _plain(v) for k, v in scalars.items()}}
    self.history.append(row)
    if not self.chief:
      return row
    with open(self.path, "a") as f:
      f.write(json.dumps(row) + "\n")
    if self._writer is not None:
      prefix = "/".join(str(v) for v in labels.values())
      for name, value in row.items():
        if name == "step" or name in labels:
          continue
        tag = f"{prefix}/{name}" if prefix else name
        for suffix, number in _numbers(value):
          self._writer.add_scalar(tag + suffix, number, step)
    return row

  def advance(self, amount: int = 1, **postfix) -> None:
    """Move the progress bar on by ``amount``; ``postfix`` is shown beside it."""
    if self._bar is not None:
      if postfix:
        self._bar.set_postfix(**postfix, refresh=False)
      self._bar.update(amount)

  def rows(self, **labels) -> list[dict]:
    """The history's rows whose labels match ``labels``."""
    return [row for row in self.history if all(row.get(k) == v for k, v in labels.items())]

  def close(self) -> None:
    """Close the progress bar and the TensorBoard writer (also on leaving a ``with`` block)."""
    if self._bar is not None:
      self._bar.close()
    if self._writer is not None:
      self._writer.close()

  def __enter__(self) -> "RunLog":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _numbers(value) -> Iterable[tuple[str, float]]:
  """``("", x)`` for a number, ``("/i", x_i)`` for each entry of a flat list, else nothing."""
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return []
  if isinstance(value, numbers.Number):
    return [("", float(value))]
  if isinstance(value, list) and all(isinstance(v, numbers.Number) for v in value):
    return [(f"/{i}", float(v)) for i, v in enumerate(value)]
  return []


def read_history(path: str, upto: Optional[int] = None) -> list[dict]:
  """The rows of a ``history.jsonl`` (those with ``step <= upto`` when given)."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return rows if upto is None else [row for row in rows if row["step"] <= upto]
