"""Where a grid's wall time goes: XLA compiles counted by a ``jax.monitoring`` listener on the
backend-compile event, and the seconds of building, training and checkpointing that a run adds
up per grid (a sweep's ``timing.json``).

The listener attributes each compile to the thread that ran it, so that a grid compiled ahead
in a background thread while another one trains (``sweep.train``) counts its own programs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Iterator, Optional

import jax

# jax's event for one XLA compile (jax._src.dispatch.BACKEND_COMPILE_EVENT), recorded with the
# compiled function's name as ``fun_name`` and the compile's duration in seconds.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_counting = threading.local()  # .counts: the CompileCounts this thread adds to, innermost last
_registered = threading.Lock()
_listening = False


@dataclasses.dataclass(eq=False)  # each is counted into by identity
class CompileCounts:
  """The XLA compiles that ran in one thread while it was counting (``counting``): jax's
  backend compiles, a program loaded from jax's persistent compilation cache among them, not
  the hits of its in-memory caches.

  Attributes:
    names: each compiled function's name, in the order compiled.
    seconds: their compile seconds, summed.
  """
  names: list = dataclasses.field(default_factory=list)
  seconds: float = 0.0

  @property
  def count(self) -> int:
    """How many programs were compiled."""
    return len(self.names)

  def add(self, other: "CompileCounts") -> None:
    """Count ``other``'s compiles too."""
    self.names.extend(other.names)
    self.seconds += other.seconds


def _on_event(event: str, duration: float, **kwargs) -> None:
  if event != BACKEND_COMPILE_EVENT:
    return
  for counts in getattr(_counting, "counts", ()):
    counts.names.append(str(kwargs.get("fun_name", "?")))
    counts.seconds += float(duration)


def _listen() -> None:
  """Register the listener once per process (jax keeps listeners for the process' life)."""
  global _listening
  with _registered:
    if not _listening:
      jax.monitoring.register_event_duration_secs_listener(_on_event)
      _listening = True


@contextlib.contextmanager
def counting(counts: Optional[CompileCounts] = None) -> Iterator[CompileCounts]:
  """``with counting() as counts:`` counts the XLA compiles this thread runs inside the block
  (nested blocks each count them).

  Args:
    counts: the ``CompileCounts`` to add to; default a new one.

  Yields:
    ``counts``.
  """
  counts = CompileCounts() if counts is None else counts
  _listen()
  if not hasattr(_counting, "counts"):
    _counting.counts = []
  _counting.counts.append(counts)
  try:
    yield counts
  finally:
    _counting.counts.remove(counts)


@dataclasses.dataclass
class GridTiming:
  """One grid's wall time in one call of a run.

  Attributes:
    compiles: the XLA compiles of building and training it (a grid built ahead: its programs,
      init and chunk, compiled once; none while it trains).
    build_seconds: tracing, lowering and compiling its programs (``Grid.of``), in whichever
      thread built it.
    waited_seconds: how long the training thread waited for it to be built (all of
      ``build_seconds`` when it is built in turn, less when it is built ahead).
    train_seconds: its training loop (``RunHooks.train``), checkpoints' waits included.
    checkpoint_seconds: of those, the seconds the loop was blocked by checkpoints.
  """
  compiles: CompileCounts = dataclasses.field(default_factory=CompileCounts)
  build_seconds: float = 0.0
  waited_seconds: float = 0.0
  train_seconds: float = 0.0
  checkpoint_seconds: float = 0.0

  def as_json(self) -> dict:
    """The record ``timing.json`` keeps of it (seconds to the millisecond)."""
    seconds = lambda s: round(s, 3)
    return {"compiles": self.compiles.count, "compiled": list(self.compiles.names),
            "compile_seconds": seconds(self.compiles.seconds),
            "build_seconds": seconds(self.build_seconds),
            "waited_seconds": seconds(self.waited_seconds),
            "train_seconds": seconds(self.train_seconds),
            "checkpoint_seconds": seconds(self.checkpoint_seconds)}

  def line(self, name: str) -> str:
    """The log line of the grid ``name``."""
    return (f"grid {name}: {self.compiles.count} compile(s) "
            f"({', '.join(self.compiles.names) or 'none'}) {self.compiles.seconds:.1f} s, "
            f"built in {self.build_seconds:.1f} s (waited {self.waited_seconds:.1f} s), "
            f"trained in {self.train_seconds:.1f} s (checkpoints {self.checkpoint_seconds:.1f} s)")


class Stopwatch:
  """``with Stopwatch() as watch:`` ... ``watch.seconds``: the block's wall seconds."""

  def __init__(self):
    self.started, self.seconds = None, 0.0

  def __enter__(self) -> "Stopwatch":
    self.started = time.perf_counter()
    return self

  def __exit__(self, *exc) -> None:
    self.seconds = time.perf_counter() - self.started
