"""Where a training step's time goes: one model's step of the grid engine, profiled.

Traces a few steps with ``jax.profiler`` (a Perfetto trace: one event per executed XLA
operation), maps each operation back to the compiled program's HLO, and attributes its time to
what it computes: matmuls, the attention weights, the LayerNorm/GELU tails, the loss and
embeddings, the optimiser update and the on-device data generation, each split into forward
and backward where that applies.

  python benchmarks/step_profile.py [--arch mte] [--d_model 128] [--seq_len 128] [--steps 4]

The defaults are the NAP paper's (MTE, d = N = 128, L = 2, H = 4, batch 32). Shares are of the
operations' summed time (XLA runs some of them on two threads at once, so the sum can exceed
the wall time, which is printed beside it). The last line: matmul_share=<x>.
"""
from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from normattn_jax.sweep.config import base_config
from normattn_jax.sweep.programs import Setup, make_programs

_ARCH = flags.DEFINE_string("arch", "mte", "Architecture.")
_D_MODEL = flags.DEFINE_integer("d_model", 128, "Model width.", lower_bound=1)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Sequence length N.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 4, "Training steps traced.", lower_bound=1)

# What an operation belongs to, from its HLO metadata's op_name (flax module paths, jax function
# names), tried in order; a fusion holding a dot is a matmul whatever its name. "jvp(" marks the
# forward pass, "transpose(jvp(" the backward pass, neither the optimiser's update.
KINDS = (
    ("data generation", re.compile(r"randint|threefry|random_bits|case_labels")),
    ("attention weights", re.compile(r"/attention/(?!(query|key|value|out)/)")),
    ("q/k/v/out bias, head layout", re.compile(r"/attention/(query|key|value|out)/")),
    ("LayerNorms", re.compile(r"norm/")),
    ("FFN bias", re.compile(r"/ffn_(in|out)/")),
    ("GELU, residual adds", re.compile(r"block_\d+/")),
    ("loss, head, embeddings", re.compile(r"_head|embedding|jvp\(\)")),
)
def computations(hlo: str) -> dict:
  """HLO text -> {computation name: its lines}."""
  found, current = {}, None
  for line in hlo.splitlines():
    header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
    if header and not line.startswith(" "):
      current = found.setdefault(header.group(1), [])
    elif current is not None:
      current.append(line)
  return found


def instructions(comps: dict) -> dict:
  """{instruction name: its defining text} over every computation."""
  found = {}
  for lines in comps.values():
    for line in lines:
      match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (.*)", line)
      if match:
        found[match.group(1)] = match.group(2)
  return found


def opcodes(comps: dict, name: str, seen=None) -> set:
  """The opcodes inside a computation and the computations it calls."""
  seen = set() if seen is None else seen
  if name in seen or name not in comps:
    return set()
  seen.add(name)
  found = set()
  for line in comps[name]:
    match = re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = \S+ ([\w\-]+)\(", line)
    if match:
      found.add(match.group(1))
    for called in re.findall(r"(?:calls|to_apply)=%?([\w.\-]+)", line):
      found |= opcodes(comps, called, seen)
  return found


def attribute(name: str, comps: dict, instrs: dict) -> tuple[str, str]:
  """(what an executed operation computes, "forward" / "backward" / "") from its HLO; events
  that are no operation of the program are the runtime's own work."""
  if name not in instrs:
    return "runtime (launch, waits)", ""
  text = instrs[name]
  opcode = re.search(r"\s([a-z][\w\-]*)\(", " " + text)
  ops = {opcode.group(1)} if opcode else set()
  for called in re.findall(r"calls=%?([\w.\-]+)", text):
    ops |= opcodes(comps, called)
  op_name = re.search(r'op_name="([^"]*)"', text)
  op_name = op_name.group(1) if op_name else ""
  direction = ("backward" if "transpose(jvp" in op_name else
               "forward" if "jvp(" in op_name else "")
  if "dot" in ops or "convolution" in ops:
    return "matmuls", direction
  for kind, pattern in KINDS:
    if pattern.search(op_name):
      return kind, direction
  if op_name:
    return "optimiser update", direction
  return "copies of the loop state", direction


def traced_events(log_dir: str) -> collections.Counter:
  """Summed microseconds per operation name in the newest Perfetto trace under ``log_dir``."""
  path = sorted(glob.glob(os.path.join(log_dir, "**", "*.trace.json.gz"), recursive=True))[-1]
  with gzip.open(path) as f:
    events = json.load(f)["traceEvents"]
  times = collections.Counter()
  for event in events:
    if event.get("ph") == "X" and not event["name"].startswith(("ThunkExecutor", "$",
                                                                 "PjitFunction")):
      times[event["name"]] += event["dur"]
  return times


def main(argv):
  del argv
  c = base_config()
  c.model.d_model, c.task.seq_len = _D_MODEL.value, _SEQ_LEN.value
  programs = make_programs(Setup(_ARCH.value, c))
  steps = _STEPS.value
  hp = {"learning_rate": jnp.float32(1e-3), "l2": jnp.float32(0.0), "dropout": jnp.float32(0.0)}
  state = jax.jit(programs.init)(np.asarray(jax.random.key_data(jax.random.key(0))), hp)
  run = jax.jit(lambda s, h: jax.lax.scan(lambda s, _: programs.train_step(s, h), s, None,
                                          length=steps)[0])
  compiled = run.lower(state, hp).compile()
  comps = computations(compiled.as_text())
  instrs = instructions(comps)
  state = jax.block_until_ready(compiled(state, hp))  # warm up
  with tempfile.TemporaryDirectory() as log_dir:
    jax.profiler.start_trace(log_dir, create_perfetto_trace=True)
    start = time.perf_counter()
    state = jax.block_until_ready(compiled(state, hp))
    wall = time.perf_counter() - start
    jax.profiler.stop_trace()
    times = traced_events(log_dir)
  shares = collections.Counter()
  for name, micros in times.items():
    shares[attribute(name, comps, instrs)] += micros
  total = sum(shares.values())
  print(f"{_ARCH.value}, d={_D_MODEL.value}, N={_SEQ_LEN.value}, batch {c.train.batch_size}: "
        f"{steps} steps in {wall * 1e3:.0f} ms wall; operations {total / 1e3:.0f} ms summed")
  print(f"{'what':>24} {'direction':>9} {'ms/step':>8} {'share':>6}")
  by_kind = collections.Counter()
  for (kind, direction), micros in shares.most_common():
    by_kind[kind] += micros
    print(f"{kind:>24} {direction or '-':>9} {micros / 1e3 / steps:8.1f} {micros / total:6.1%}")
  print("by kind: " + ", ".join(f"{k} {v / total:.1%}" for k, v in by_kind.most_common()))
  print(f"matmul_share={by_kind['matmuls'] / total:.3f}")


if __name__ == "__main__":
  app.run(main)
