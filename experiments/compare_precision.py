"""bfloat16 against float32, on two grids at reduced scale and on each normalisation's weights.

  python experiments/compare_precision.py --workdir runs/precision [--grids case,mode]
      [--num_steps 500] [--reductions]

**Grids.** Each grid (``grid_config``: the case task with all-token output and the mode task,
whose classes head reads token 0; BERT, MTE, NAP and NON at d = N = 32, three learning rates,
three seeds) is trained twice from the same seeds, ``model.dtype`` float32 and bfloat16
(parameters and Adam's state float32 in both: ``normattn_jax.precision``), each a sweep of its
own in ``<workdir>/<grid>_<dtype>`` (a finished one is read back, an interrupted one resumed).
Per grid, split (training, validation accuracy) and arch, the best cell of each dtype (its
learning rate; the mean over seeds, each seed at its best over training) and the seeds' spread
(max - min over the seeds) at the two best cells, the larger of the two. A line each:

  grid=case split=val arch=nap float32=0.962@0.027 bfloat16=0.958@0.027 spread=0.021 same=yes

``same`` when the two bests lie within the spread and the two learning rates are one, or tie:
each dtype's mean at the other's rate lies within the spread of its own best. The last grid
line: same_best_cells=<k>/<n>.

**Reductions** (``--reductions``). Per normalisation of the papers, the attention output and
the parameters' gradient of ``MultiHeadAttention`` (4 heads of 8, N = 128, tokens sharing a
common direction, as a trained residual stream does, so that the logits share an offset) in
bfloat16, against float32: under the policy (the weights' exponentials, statistics and
log-space iterations in float32), and with those too in bfloat16 (``attention.weights``
computing in the logits' dtype). A line each:

  normalization=nap policy_rms=... policy_gradient=... bf16_rms=... bf16_gradient=...
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from absl import app, flags

_WORKDIR = flags.DEFINE_string("workdir", None, "Where the grids' sweeps go.")
_GRIDS = flags.DEFINE_list("grids", ["case", "mode"], "Grids to compare (case, mode).")
_NUM_STEPS = flags.DEFINE_integer("num_steps", 500, "Training steps per model.", lower_bound=100)
_REDUCTIONS = flags.DEFINE_boolean("reductions", True, "Also measure the normalisations' "
                                   "weights with their reductions in bf16.")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1,
                                    "Host devices a CPU is split into.", lower_bound=1)

DTYPES = ("float32", "bfloat16")
ARCHS = ("bert", "mte", "nap", "non")
SPLITS = ("train", "val")
PAPER_NORMALIZATIONS = ("softmax", "dnas", "hnas", "sinkhorn", "nap", "non")


def grid_config(grid: str, dtype: str, num_steps: int):
  """One reduced grid in one dtype: the case task (all-token output, N = 32, validated at 16)
  or the mode task (S = 10, N = 32, validated at 64), d = 32, L = 2, H = 4, batch 32."""
  from normattn_jax.configs import case_distinction, mode_finding
  if grid not in ("case", "mode"):
    raise app.UsageError(f"--grids: {grid!r} is not one of ('case', 'mode')")
  c = case_distinction.get_config() if grid == "case" else mode_finding.get_config()
  c.archs = ARCHS
  c.learning_rates = (0.09, 0.027, 0.0081) if grid == "case" else (0.027, 0.0081, 0.00243)
  c.num_seeds = 3
  c.task.seq_len = 32
  c.model.d_model, c.model.dtype = 32, dtype
  c.train.num_steps, c.train.eval_every = num_steps, 100
  c.eval.val_batches, c.eval.case_set_size = 8, 200
  return c


def best_cells(summary: dict, split: str) -> dict:
  """arch -> {learning rate: (mean, spread)} of ``split``'s accuracy at its best over
  training (a learning rate whose every seed diverged scores 0)."""
  out = {}
  for cell in summary["cells"]:
    stats = cell["metrics"][f"{split}_acc"]
    mean = stats["mean"] or 0.0
    spread = (stats["max"] or 0.0) - (stats["min"] or 0.0)
    out.setdefault(cell["arch"], {})[cell["learning_rate"]] = (mean, spread)
  return out


def compare(cells32: dict, cells16: dict) -> dict:
  """The two dtypes' best cells of one arch: means, rates, spread and whether they agree."""
  lr32 = max(cells32, key=lambda lr: cells32[lr][0])
  lr16 = max(cells16, key=lambda lr: cells16[lr][0])
  best32, best16 = cells32[lr32][0], cells16[lr16][0]
  spread = max(cells32[lr32][1], cells16[lr16][1])
  tie = (best32 - cells32[lr16][0] <= spread and best16 - cells16[lr32][0] <= spread)
  same = abs(best32 - best16) <= spread and (lr32 == lr16 or tie)
  return {"float32": (best32, lr32), "bfloat16": (best16, lr16), "spread": spread, "same": same}


def train_grids(workdir: str, grids, num_steps: int) -> dict:
  """Each grid in each dtype, trained (or read back); grid -> dtype -> summary."""
  from normattn_jax.sweep.train import run_sweep
  out = {}
  for grid in grids:
    for dtype in DTYPES:
      path = os.path.join(workdir, f"{grid}_{dtype}")
      print(f"training {grid} in {dtype}: {path}", flush=True)
      out.setdefault(grid, {})[dtype] = run_sweep(grid_config(grid, dtype, num_steps), path,
                                                  show_progress=False, tensorboard=False)
  return out


def grid_lines(summaries: dict) -> list[str]:
  """One line per grid, split and arch, then the count of best cells that agree."""
  lines, same = [], []
  for grid, by_dtype in summaries.items():
    for split in SPLITS:
      cells32, cells16 = (best_cells(by_dtype[d], split) for d in DTYPES)
      for arch in ARCHS:
        r = compare(cells32[arch], cells16[arch])
        same.append(r["same"])
        lines.append(f"grid={grid} split={split} arch={arch} "
                     f"float32={r['float32'][0]:.3f}@{r['float32'][1]:g} "
                     f"bfloat16={r['bfloat16'][0]:.3f}@{r['bfloat16'][1]:g} "
                     f"spread={r['spread']:.3f} same={'yes' if r['same'] else 'no'}")
  lines.append(f"same_best_cells={sum(same)}/{len(same)}")
  return lines


def relative(error, reference) -> float:
  flat = lambda tree: jnp.concatenate([jnp.ravel(x).astype(jnp.float32)
                                       for x in jax.tree.leaves(tree)])
  return float(jnp.linalg.norm(flat(error)) / jnp.linalg.norm(flat(reference)))


def attention_errors(name: str) -> dict:
  """bf16's relative errors of one normalisation's attention, under the policy and with the
  weights' reductions in bf16 too, against float32 on the same parameters and inputs."""
  from normattn_jax.attention import weights
  from normattn_jax.attention.module import MultiHeadAttention
  keys = jax.random.split(jax.random.key(0), 4)
  common = jax.random.normal(keys[0], (1, 1, 32))
  x = 3.0 * common + jax.random.normal(keys[1], (2, 128, 32))  # a shared direction + noise
  cotangent = jax.random.normal(keys[2], x.shape)
  layer = lambda dtype: MultiHeadAttention(num_heads=4, normalization=name,
                                           implementation="quadratic", dtype=dtype)
  params = layer(jnp.float32).init(keys[3], x)

  def run(dtype):
    def loss(p):
      out = layer(dtype).apply(p, x)
      return jnp.sum(out.astype(jnp.float32) * cotangent), out
    (_, out), grad = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return out.astype(jnp.float32), grad

  out32, grad32 = run(jnp.float32)
  out16, grad16 = run(jnp.bfloat16)
  promote, scale = weights._compute_dtype, weights.power_of_two
  weights._compute_dtype = lambda dtype: jnp.dtype(dtype)  # the reductions in bf16 too
  # NAP's exact 2**e rescaling writes float32 exponent bits; the same power of two in bf16
  weights.power_of_two = lambda e, dtype: jnp.exp2(e.astype(jnp.float32)).astype(dtype)
  try:
    all16, all_grad16 = run(jnp.bfloat16)
  finally:
    weights._compute_dtype, weights.power_of_two = promote, scale
  error = lambda a, b: relative(jax.tree.map(jnp.subtract, a, b), b)
  return {"policy_rms": error(out16, out32), "policy_gradient": error(grad16, grad32),
          "bf16_rms": error(all16, out32), "bf16_gradient": error(all_grad16, grad32)}


def main(argv):
  del argv
  jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value)
  if _WORKDIR.value is None and _GRIDS.value:
    raise app.UsageError("--workdir is required to train the grids (or pass --grids=)")
  if _GRIDS.value:
    summaries = train_grids(_WORKDIR.value, _GRIDS.value, _NUM_STEPS.value)
    print("\n".join(grid_lines(summaries)), flush=True)
  if _REDUCTIONS.value:
    for name in PAPER_NORMALIZATIONS:
      errors = attention_errors(name)
      print(f"normalization={name} " + " ".join(f"{k}={v:.4f}" for k, v in errors.items()),
            flush=True)


if __name__ == "__main__":
  app.run(main)
