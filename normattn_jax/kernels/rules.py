"""Where a kernel is used on its own: only where it was measured faster than the XLA path, on
the kind of device the program runs on.

``benchmarks/kernel_speed.py`` times each kernel beside the XLA path at the grids' shapes (on the
GPU queue, ``benchmarks/gpu_checks.sh``) and writes what it measured as a rules file: per device
kind (``jax.Device.device_kind``, e.g. "NVIDIA H200"), one entry per kernel and shape with the
speedup (the XLA path's seconds over the kernel's, side by side in one run). The library reads
the rules shipped with it, ``measured.json`` beside this module (``--merge`` puts a queue's
file there), or the file named by the environment variable ``NORMATTN_JAX_KERNEL_RULES``
instead. A shape that was not measured on the device at hand gets the caller's default: the
fused attention's key count from single-model timings, the XLA feed-forward. A program traced
for another machine (``jax.export``) has no device kind and gets the defaults too.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Optional

from normattn_jax.kernels import platform as platform_lib

RULES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "measured.json")
ENVIRONMENT = "NORMATTN_JAX_KERNEL_RULES"
FORMAT = 1
KERNELS = ("fused_attention", "ffn")
# The fields that name a measured shape of each kernel (each entry also has "speedup").
KEYS = {"fused_attention": ("normalization", "dtype", "num_keys", "head_dim"),
        "ffn": ("layout", "dtype", "d_model", "ffn_features")}
# A kernel counts as faster from this speedup on: below, a timing's spread could decide.
MIN_SPEEDUP = 1.05


def rules_path() -> str:
  """The rules file read: ``NORMATTN_JAX_KERNEL_RULES`` if set, else the shipped one."""
  return os.environ.get(ENVIRONMENT) or RULES_FILE


def check_rules(rules: dict, source: str = "rules") -> dict:
  """Refuse a rules tree that is not of ``FORMAT`` (naming ``source`` and what is wrong).

  Args:
    rules: the parsed file, ``{"format": 1, "devices": {kind: {kernel: [entry, ...]}}}``.
    source: where it came from, for the message.

  Returns:
    ``rules``.

  Raises:
    ValueError: for another format, an unknown kernel, or an entry without its key fields and
      a positive speedup.
  """
  if not isinstance(rules, dict) or rules.get("format") != FORMAT:
    raise ValueError(f"{source}: format must be {FORMAT}, got {rules.get('format')!r}"
                     if isinstance(rules, dict) else f"{source}: not a JSON object")
  for kind, kernels in rules.get("devices", {}).items():
    for kernel, entries in kernels.items():
      if kernel not in KERNELS:
        if kernel in ("source", "command", "measured"):
          continue
        raise ValueError(f"{source}: device {kind!r}: kernel {kernel!r} is not one of {KERNELS}")
      for entry in entries:
        missing = [k for k in KEYS[kernel] if k not in entry]
        speedup = entry.get("speedup")
        if missing or not isinstance(speedup, (int, float)) or not speedup > 0:
          raise ValueError(f"{source}: device {kind!r}: {kernel} entry {entry!r} needs "
                           f"{KEYS[kernel]} and a speedup > 0")
  return rules


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict:
  if not os.path.exists(path):
    if path == RULES_FILE:
      return {"format": FORMAT, "devices": {}}
    raise ValueError(f"{ENVIRONMENT}={path!r}: no such file")
  with open(path) as f:
    return check_rules(json.load(f), path)


def load() -> dict:
  """The rules in force (``rules_path``), read once per path."""
  return _load(rules_path())


def measured_speedup(kernel: str, device_kind: Optional[str] = None, **shape) -> Optional[float]:
  """The speedup measured for ``kernel`` at ``shape`` on ``device_kind`` (default: the traced
  program's device), or None where that was not measured.

  Args:
    kernel: one of ``KERNELS``.
    device_kind: a ``jax.Device.device_kind``; None asks ``platform.target()``.
    **shape: the fields ``KEYS[kernel]`` (e.g. normalization, dtype, num_keys, head_dim).

  Returns:
    The XLA path's time over the kernel's, or None.
  """
  if kernel not in KERNELS:
    raise ValueError(f"kernel={kernel!r}: must be one of {KERNELS}")
  kind = device_kind or platform_lib.target().device_kind
  if kind is None:
    return None
  wanted = {k: shape[k] for k in KEYS[kernel]}
  for entry in load().get("devices", {}).get(kind, {}).get(kernel, ()):
    if all(entry[k] == v for k, v in wanted.items()):
      return float(entry["speedup"])
  return None


def faster(kernel: str, device_kind: Optional[str] = None, **shape) -> Optional[bool]:
  """Whether ``kernel`` was measured faster (by ``MIN_SPEEDUP``) at ``shape``; None where it
  was not measured (``measured_speedup``)."""
  speedup = measured_speedup(kernel, device_kind, **shape)
  return None if speedup is None else speedup >= MIN_SPEEDUP


def merged(rules: dict, measured: dict) -> dict:
  """``rules`` with each device of ``measured`` replaced by its new measurements.

  Args:
    rules: a rules tree (``check_rules``).
    measured: another, e.g. what the GPU queue wrote.

  Returns:
    A new tree.
  """
  out = {"format": FORMAT, "devices": dict(rules.get("devices", {}))}
  out["devices"].update(measured.get("devices", {}))
  return out
