"""The platform a program is traced for, which decides how a Pallas kernel is lowered.

A Pallas kernel is lowered while its program is traced: to Triton on an NVIDIA GPU, to Mosaic on
a TPU, and on a CPU, which has no lowering of its own, run by Pallas' interpreter. The platform is
the default device's, unless a program is traced inside ``tracing_for``: for an export to another
platform than this machine's (``jax.export``, where nothing may be interpreted), or to run a
platform's kernels here in Pallas' interpret mode (the tests' way of checking them on a CPU).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Iterator, Optional

import jax

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


@dataclasses.dataclass(frozen=True)
class Target:
  """Where a traced program runs.

  Attributes:
    platform: one of ``PLATFORMS``.
    interpret: Pallas kernels run in interpret mode (on this machine's CPU).
    device_kind: the device's kind as jax names it (e.g. "NVIDIA H200"), by which measured
      rules are looked up; None where the program is traced for another machine.
  """
  platform: str
  interpret: bool
  device_kind: Optional[str]


_TRACING_FOR = contextvars.ContextVar("normattn_jax_kernels_tracing_for", default=None)


def check_platform(platform: str) -> str:
  """``platform``, refused (naming it) unless it is one of ``PLATFORMS``."""
  if platform not in PLATFORMS:
    raise ValueError(f"platform={platform!r}: must be one of {PLATFORMS}")
  return platform


@contextlib.contextmanager
def tracing_for(platform: str, interpret: bool = False) -> Iterator[Target]:
  """Programs traced inside are lowered for ``platform`` whatever this machine is; with
  ``interpret``, its kernels (their block sizes and layouts) run in Pallas' interpret mode here.

  Args:
    platform: one of ``PLATFORMS``.
    interpret: run the kernels interpreted on this machine (a CPU) instead of lowering them.

  Yields:
    The ``Target`` in force inside.
  """
  target_ = Target(check_platform(platform), bool(interpret or platform == "cpu"), None)
  token = _TRACING_FOR.set(target_)
  try:
    with contextlib.ExitStack() as stack:
      if platform == "tpu" and target_.interpret:  # jax's own TPU kernels (flash attention) too
        from jax.experimental.pallas import tpu as pltpu
        stack.enter_context(pltpu.force_tpu_interpret_mode())
      yield target_
  finally:
    _TRACING_FOR.reset(token)


def device_platform(device) -> str:
  """The ``PLATFORMS`` name of a jax device: "cuda" or "rocm" for a GPU."""
  if device.platform != "gpu":
    return device.platform
  version = str(getattr(device.client, "platform_version", "")).lower()
  return "rocm" if "rocm" in version else "cuda"


def target() -> Target:
  """The ``Target`` of the program being traced: ``tracing_for``'s inside it, else the default
  device's (interpreted on a CPU)."""
  forced = _TRACING_FOR.get()
  if forced is not None:
    return forced
  device = jax.devices()[0]
  platform = device_platform(device)
  return Target(platform, platform == "cpu", device.device_kind)
