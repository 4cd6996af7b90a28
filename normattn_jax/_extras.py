"""Optional dependencies and the versions a run used.

The core install (jax, flax, optax, chex, numpy) is enough for the attention modules, blocks and
models. The rest comes with extras (setup.py), so that a Flax user does not pull TensorFlow
Datasets or a plotting library: ``NEEDED`` says which extra each part of the library needs, and
``require`` turns a missing package into an error that names the extra to install. The
installing guide's table of extras (docs/guides/installing.md) says the same
(tests/test_extras.py checks the three against each other and against every module's imports).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys

EXTRAS = ("experiments", "pretrain", "bert", "analysis", "all", "peer")

# The extra each part of the library needs (the longest matching module prefix wins; a module
# of none needs the core install only). A part may use a larger extra in some calls, and then
# names it with ``require`` there: e.g. models.bert's tokenizer (``bert``), the rank test of
# sweep.seeds (``analysis``).
NEEDED = {
    "normattn_jax.train": "experiments",
    "normattn_jax.sweep": "experiments",
    "normattn_jax.pretrain": "pretrain",
    "normattn_jax.reporting": "experiments",
    "normattn_jax.reporting.leaderboard": "analysis",
    "normattn_jax.card": "analysis",
    "normattn_jax.cli": "experiments",
    "normattn_jax.cli.leaderboard": "analysis",
    "normattn_jax.configs": "experiments",
    "normattn_jax.configs.report_card": "analysis",
    "normattn_jax.data": "pretrain",
    "normattn_jax.analysis": "analysis",
    # a pre-training encoder's SentencePiece, a HuggingFace encoder's tokenizers, TFDS tasks
    "normattn_jax.finetune": "all",
    "normattn_jax.pytorch_peer": "peer",
}

# The distributions whose versions a results folder records, when installed.
RECORDED = ("normattn_jax", "jax", "jaxlib", "flax", "optax", "chex", "numpy", "orbax-checkpoint",
            "ml-collections", "scipy", "tensorflow-datasets", "sentencepiece", "tokenizers",
            "safetensors", "wordfreq", "matplotlib")


def require(module: str, extra: str):
  """Import ``module``, or raise an ImportError naming the extra that installs it.

  Args:
    module: the module's import name, e.g. "safetensors.numpy".
    extra: the extra that installs it, one of ``EXTRAS``.

  Returns:
    The imported module.

  Raises:
    ImportError: if ``module`` cannot be imported.
    ValueError: if ``extra`` is not one of ``EXTRAS``.
  """
  if extra not in EXTRAS:
    raise ValueError(f"unknown extra {extra!r}; one of {EXTRAS}")
  try:
    return importlib.import_module(module)
  except ImportError as err:
    package = module.partition(".")[0]
    caller = sys._getframe(1).f_globals.get("__name__", "this feature")
    raise ImportError(f"{caller} needs the optional package {package}: "
                      f"pip install 'normattn_jax[{extra}]'", name=module) from err


def cpu_cores() -> int:
  """The cores this process may run on (its affinity: ``taskset`` narrows it)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 1


def versions() -> dict:
  """Python, the platform, the devices and the versions of ``RECORDED``: what a result ran with.
  The CPU cores count too: XLA's CPU matmuls split their sums over the cores a process may use,
  so a CPU run's numbers change with them (to float rounding), as with the device count.

  Returns:
    ``{"python", "platform", "backend", "device_kind", "device_count", "process_count",
    "cpu_cores", "packages"}`` and, on a CPU, ``"cpu_model"`` (``cpu_description``);
    ``packages`` maps each installed distribution of ``RECORDED`` to its version.
  """
  import jax

  packages = {}
  for name in RECORDED:
    try:
      packages[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  devices = jax.devices()
  out = {"python": platform.python_version(), "platform": platform.platform(),
         "backend": jax.default_backend(), "device_kind": devices[0].device_kind,
         "device_count": len(devices), "process_count": jax.process_count(),
         "cpu_cores": cpu_cores(), "packages": packages}
  if out["backend"] == "cpu":  # a CPU device's kind is "cpu": the model names the machine
    out["cpu_model"] = cpu_description()[0]
  return out


# CPU features that decide which kernels XLA's CPU compiler emits, and so a CPU run's float
# rounding (an AVX-512 machine and an AVX2 one train the same seeds to other numbers).
CPU_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                "avx512_fp16", "amx_tile", "asimd", "sve")


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, list[str]]:
  """The CPU's model name and which of ``CPU_FEATURES`` it has (Linux's ``/proc/cpuinfo``;
  elsewhere ``platform.processor()`` and no features)."""
  models, flags = [], set()
  try:
    with open(cpuinfo) as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model"):
          models.append(value.strip())
        elif key.strip() in ("flags", "Features"):
          flags |= set(value.split())
  except OSError:
    pass
  model = models[0] if models else platform.processor() or "unknown"
  return model, [f for f in CPU_FEATURES if f in flags]


def machine_fingerprint() -> dict:
  """What decides a run's float rounding beyond its config: the backend, the device kind and
  count, the process count, jax and jaxlib, XLA's flags and JAX's default matmul precision, and
  on a CPU its model, features and the cores the process may use. Two runs of one config and
  seeds agree bit for bit only on one fingerprint.

  Returns:
    ``{"backend", "device_kind", "device_count", "process_count", "jax", "jaxlib", "xla_flags",
    "matmul_precision"}`` and, on a CPU, ``"cpu_model", "cpu_features", "cpu_cores"``.
  """
  import jax

  v = versions()
  out = {key: v[key] for key in ("backend", "device_kind", "device_count", "process_count")}
  out.update({name: v["packages"].get(name) for name in ("jax", "jaxlib")})
  out["xla_flags"] = os.environ.get("XLA_FLAGS", "")
  out["matmul_precision"] = str(jax.config.jax_default_matmul_precision)
  if out["backend"] == "cpu":
    out["cpu_model"], out["cpu_features"] = cpu_description()
    out["cpu_cores"] = v["cpu_cores"]
  return out


def fingerprint_id(fingerprint: dict) -> str:
  """A short name of a fingerprint: the first 8 hex digits of its JSON's SHA-256."""
  import hashlib
  import json
  return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:8]
