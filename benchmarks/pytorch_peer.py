"""The grid engine against what a PyTorch user would write for the same models.

Measured side by side in one run (variants interleaved, medians of repeats), training steps only
(no evaluation), the same steps per timed call on every side:

  * the NAP paper's defaults (MTE, d = N = 128, L = 2, H = 4, batch 32, the case task at vocab
    100): M models trained by PyTorch one after another (a plain ``nn.Module``,
    ``torch.optim.Adam``) against the engine training the M models as one program;
  * small models (d = N = 32): M models as one ``torch.func`` ensemble (``stack_module_state``,
    ``vmap`` of ``grad_and_value`` of ``functional_call``, Adam in ``torch._foreach`` ops over
    the stacked parameters, as PyTorch's model-ensembling tutorial) against the engine; PyTorch
    one after another is shown for context.

Each side is taken at its better configuration: the engine, built as benchmarks/grid_throughput.py
builds it (``train_step`` scanned over the steps, ``over_models``), in the variants it times;
the ensemble with PyTorch's fused attention kernel (which ``vmap`` runs model by model, having
no batching rule for it on the CPU) or with attention in plain ops. Both sides draw a fresh batch
per step on their device, and both use Adam with learning rate 1e-3 and Keras' epsilon 1e-7 (the
engine also decays it linearly, which costs nothing measurable). Before timing, the PyTorch
network is checked to be ours: the same parameter count, and the same logits once our flax
parameters are copied into it (the PyTorch side: normattn_jax/pytorch_peer.py). PyTorch runs
with ``--torch_threads`` threads; pin the process to as many cores (``taskset -c 0,1``) so that
XLA uses no more, and measure on quiet cores: PyTorch's threads wait for each other, so any
other load on those cores slows it many-fold.

  python benchmarks/pytorch_peer.py [--repeats 3] [--steps 4] [--models_default 10]
                                    [--models_small 50] [--torch_threads 2]

The last lines: engine_over_pytorch_sequential_at_defaults=<engine / PyTorch one after another>
and engine_over_torch_func_at_32=<engine / torch.func ensemble>.
"""
from __future__ import annotations

import functools
import os
import statistics
import sys
import warnings

try:
  import torch
except ImportError:
  sys.exit("PyTorch is needed for this benchmark: "
           "pip install torch --index-url https://download.pytorch.org/whl/cpu")

import jax
from absl import app, flags

# The engine's programs, timer and flags (--repeats, --steps) are grid_throughput's.
import grid_throughput
from grid_throughput import build, setup_for, timed
from normattn_jax.pytorch_peer import (LOGIT_TOLERANCE, check_same_network, ensemble_trainer,
                                       sequential_trainer)

_MODELS_DEFAULT = flags.DEFINE_integer("models_default", 10, "Models M at the paper's defaults "
                                       "(d = N = 128); at least 2: the engine's variants are "
                                       "programs of several models.", lower_bound=2)
_MODELS_SMALL = flags.DEFINE_integer("models_small", 50, "Models M at d = N = 32; at least 2.",
                                     lower_bound=2)
_TORCH_THREADS = flags.DEFINE_integer("torch_threads", 2, "torch.set_num_threads.",
                                      lower_bound=1)


# ----- the measurement -----

def measure(d_model, num_models, steps, repeats, torch_variants):
  """Model-steps/s of the engine (grid_throughput's variants) and of PyTorch, interleaved."""
  setup = setup_for(d_model, d_model)
  variants, flops = {}, grid_throughput.flops_per_model_step(setup)
  for m, width, devices in grid_throughput.engine_configurations([num_models],
                                                                 jax.device_count()):
    compiled, state, hp = build(setup, m, steps, width, devices)
    name = f"engine, width {width}" + (f", {devices} devices" if devices > 1 else "")
    variants[name] = lambda c=compiled, s=state, h=hp: c(s, h)
  for name, make in torch_variants.items():
    variants[name] = make(setup, num_models, steps)
  for fn in variants.values():  # warm up
    timed(fn)
  samples = {name: [] for name in variants}
  for _ in range(repeats):
    for name, fn in variants.items():
      samples[name].append(num_models * steps / timed(fn))
  print(f"\nd=N={d_model}, M={num_models}, {steps} steps per call: "
        f"{flops / 1e9:.2f} GFLOP per model-step (XLA cost analysis)")
  print(f"{'variant':>32} {'model-steps/s':>14} {'GFLOP/s':>9}")
  rates = {name: statistics.median(values) for name, values in samples.items()}
  for name, rate in rates.items():
    print(f"{name:>32} {rate:14.2f} {rate * flops / 1e9:9.1f}")
  engine = max(rate for name, rate in rates.items() if name.startswith("engine"))
  return engine, rates


def main(argv):
  del argv
  if flags.FLAGS["models"].present:
    raise app.UsageError("--models is grid_throughput's; here use --models_default and "
                         "--models_small")
  steps, repeats = grid_throughput._STEPS.value, grid_throughput._REPEATS.value
  grid_throughput.use_cpu_devices(grid_throughput._CPU_DEVICES.value)
  torch.set_num_threads(_TORCH_THREADS.value)
  # the fused-attention ensemble is one of the variants measured, its fallback known
  warnings.filterwarnings("ignore", message="There is a performance drop because we have not "
                          "yet implemented the batching rule")
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  print(f"devices: {jax.devices()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; {cores} cores available to this process")
  if cores > _TORCH_THREADS.value:
    print(f"warning: XLA may use all {cores} cores, PyTorch {_TORCH_THREADS.value}; pin the "
          f"process (taskset) for a like-for-like comparison")
  for d_model in (32, 128):
    check = check_same_network(setup_for(d_model, d_model))
    print(f"d={d_model}: parameters ours {check['params_ours']}, torch {check['params_torch']}; "
          f"largest logit difference {check['max_logit_diff']:.1e}; labels equal "
          f"{check['labels_equal']}")
    if (check["params_ours"] != check["params_torch"] or check["max_logit_diff"] > LOGIT_TOLERANCE
        or not check["labels_equal"]):
      sys.exit(f"the PyTorch model or task differs from ours at d={d_model}: {check}")

  sequential = "pytorch, one after another"
  engine, rates = measure(128, _MODELS_DEFAULT.value, steps, repeats,
                          {sequential: sequential_trainer})
  paper = engine / rates[sequential]
  ensembles = {f"torch.func, {kind} attention": functools.partial(ensemble_trainer, sdpa=sdpa)
               for kind, sdpa in (("fused", True), ("plain", False))}
  engine, rates = measure(32, _MODELS_SMALL.value, steps, repeats,
                          {**ensembles, sequential: sequential_trainer})
  ensemble = max(rates[name] for name in ensembles)
  print(f"\npytorch_sequential_at_32={rates[sequential]:.2f} model-steps/s "
        f"(engine_over_pytorch_sequential_at_32={engine / rates[sequential]:.2f})")
  print(f"engine_over_pytorch_sequential_at_defaults={paper:.2f}")
  print(f"engine_over_torch_func_at_32={engine / ensemble:.2f}")


if __name__ == "__main__":
  app.run(main)
