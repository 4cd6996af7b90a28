"""What a GPU queue's logs say: a sweep's speed as averages over stated windows of its progress
bar, never the bar's own momentary figure, and how far each pytest session got.

The bar (tqdm, one update per chunk of model-steps) prints the model-steps done and the seconds
since the sweep started; a stall (compilation, an evaluation, a checkpoint) shows as seconds with
no progress. Per sweep of the log (its ``-- <name>: <command>`` line) this prints: the whole run
(start to the last update, stalls included), its first minute, each stretch of steady progress
(updates at most ``--stall`` seconds apart), each stall between them, and the time the sweep's
total would take at the whole run's rate and at the fastest stretch's rate (the whole run's where
the log holds no stretch).

Per pytest session of a log (its result characters, one per test, as ``-n`` prints them): how
many results it printed, how many passed and failed and at which place each failure came, and
whether the session ended (its summary line) or the log stops first (a step cut by its budget).

  python benchmarks/queue_log.py results/gpu_queue/2026-11-27_h200/{queue,a_tests}.txt

The last line: hours_at_run_rate=<h> hours_at_stretch_rate=<h> (of the last sweep found).
"""
from __future__ import annotations

import dataclasses
import re
import sys

from absl import app, flags

_STALL = flags.DEFINE_float("stall", 5.0, "More seconds than this between two updates of the bar "
                            "is a stall.")

SWEEP = re.compile(r"^-- (\w+): ", re.MULTILINE)
UPDATE = re.compile(r"([\d.]+)([kMG]?)/([\d.]+)([kMG]?) \[(?:(\d+):)?(\d\d):(\d\d)<")
UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}
RESULTS_LINE = re.compile(r"^([.FEsxX]+)\s*(?:\[\s*\d+%\])?$")
SUMMARY_LINE = re.compile(r"^=*\s*(\d+ (?:passed|failed)\b.*?)=*$")


@dataclasses.dataclass(frozen=True)
class Window:
  """Model-steps done between two moments of a sweep, and their average rate."""
  label: str
  start: float
  end: float
  steps: float

  @property
  def rate(self) -> float:
    return self.steps / (self.end - self.start)


def updates(text: str) -> tuple[list[tuple[int, float]], float]:
  """``([(seconds since the sweep started, model-steps done)], total)`` of a progress bar, in
  order, one entry per second (its largest count)."""
  points: dict = {}
  total = 0.0
  for m in UPDATE.finditer(text):
    hours, minutes, seconds = int(m.group(5) or 0), int(m.group(6)), int(m.group(7))
    at = 3600 * hours + 60 * minutes + seconds
    done = float(m.group(1)) * UNITS[m.group(2)]
    total = float(m.group(3)) * UNITS[m.group(4)]
    points[at] = max(points.get(at, 0.0), done)
  return sorted(points.items()), total


def windows(points: list[tuple[int, float]], stall: float) -> list[Window]:
  """The run, its first minute, each stretch of steady progress and each stall between them."""
  out = [Window("whole run", 0, points[-1][0], points[-1][1])]
  minute = [p for p in points if p[0] <= 60]
  if minute and minute[-1][0] < points[-1][0]:
    out.append(Window("first minute", 0, minute[-1][0], minute[-1][1]))
  moving = [p for i, p in enumerate(points) if p[1] > 0 and (i == 0 or p[1] > points[i - 1][1])]
  stretch = [moving[0]]
  for previous, point in zip(moving, moving[1:]):
    if point[0] - previous[0] > stall:
      if len(stretch) > 1:
        out.append(Window("steady", stretch[0][0], stretch[-1][0],
                          stretch[-1][1] - stretch[0][1]))
      out.append(Window("stall", previous[0], point[0], point[1] - previous[1]))
      stretch = [point]
    else:
      stretch.append(point)
  if len(stretch) > 1:
    out.append(Window("steady", stretch[0][0], stretch[-1][0], stretch[-1][1] - stretch[0][1]))
  return out


def sweeps(text: str) -> dict:
  """``{name: the log's text of that sweep}``, in order; a sweep named again (a queue's closing
  summary repeats the last lines of its steps) keeps its first text."""
  starts = list(SWEEP.finditer(text))
  out: dict = {}
  for i, m in enumerate(starts):
    end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
    out.setdefault(m.group(1), text[m.start():end])
  return out


def summary(text: str, stall: float = 5.0) -> dict:
  """Per sweep with a progress bar: its total, windows and hours at the run's and the fastest
  stretch's rates."""
  out = {}
  for name, part in sweeps(text).items():
    points, total = updates(part)
    if not points:
      continue
    found = windows(points, stall)
    steady = [w for w in found if w.label == "steady"]
    fastest = max(steady, key=lambda w: w.rate) if steady else found[0]
    out[name] = {"total": total, "windows": found,
                 "hours_at_run_rate": total / found[0].rate / 3600,
                 "hours_at_stretch_rate": total / fastest.rate / 3600}
  return out


@dataclasses.dataclass(frozen=True)
class Session:
  """One pytest session of a log: its result characters in order, and its summary line, or
  None where the log stops before it."""
  results: str
  summary: str | None

  def describe(self) -> str:
    failed = [i + 1 for i, c in enumerate(self.results) if c in "FE"]
    end = f"ended: {self.summary}" if self.summary else "the log stops before its summary (cut)"
    places = f" (result {', '.join(map(str, failed))})" if failed else ""
    return (f"{len(self.results)} results shown, {self.results.count('.')} passed, {len(failed)} "
            f"failed{places}; {end}")


def sessions(text: str) -> list[Session]:
  """Every pytest session of a log, in order: its block of result lines (a report's failures
  after it are not results), up to its summary line."""
  out, results, started, block_open = [], "", False, False
  for line in text.splitlines():
    line = line.strip()
    result, ended = RESULTS_LINE.match(line), SUMMARY_LINE.match(line)
    if result and (block_open or not started):
      results, started, block_open = results + result.group(1), True, True
    elif ended and started:
      out.append(Session(results, ended.group(1).strip()))
      results, started, block_open = "", False, False
    elif line and started:
      block_open = False
  if started:
    out.append(Session(results, None))
  return out


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("give one or more logs of a GPU queue")
  last = None
  for path in argv[1:]:
    with open(path) as f:
      text = f.read()
    print(f"== {path}")
    for i, session in enumerate(sessions(text), start=1):
      print(f"pytest session {i}: {session.describe()}")
    for name, s in summary(text, _STALL.value).items():
      print(f"{name}: {s['total']:,.0f} model-steps in all")
      for w in s["windows"]:
        print(f"  {w.label:>12} {w.start:4.0f}-{w.end:4.0f} s: {w.steps:9,.0f} model-steps, "
              f"{w.rate:7,.0f} model-steps/s")
      last = s
  if last is None:
    print("no sweep with a progress bar", file=sys.stderr)
    return 1
  print(f"hours_at_run_rate={last['hours_at_run_rate']:.1f} "
        f"hours_at_stretch_rate={last['hours_at_stretch_rate']:.1f}")
  return 0


if __name__ == "__main__":
  app.run(main)
