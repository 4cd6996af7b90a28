"""Each kernel against the XLA path at the grids' shapes, side by side in one run, written as
the rules that ``normattn_jax.kernels.rules`` reads ("auto" uses a kernel only where it was
measured faster on that kind of device).

For d = N in --sizes (128 and 32: Table 5's and the small models' grids), 4 heads, a batch of
--batch (the sweeps' train.batch_size), --models models vmapped as a grid vmaps them, in each
of --dtypes: one ``TransformerBlock``'s forward and backward (the gradient of its parameters and
its input), once on the XLA path and once with the kernel, the two programs compiled first and
then timed in turn (the median of --repeats calls each):

* ``ffn``: the feed-forward sub-block's Pallas kernels (``ffn_implementation="pallas"``) against
  XLA's ops, in the MTE layout (MTE, NAP, NON) and the BERT one;
* ``fused_attention``: ``attention/fused.py`` (cuDNN's flash attention on an NVIDIA GPU in bf16,
  the Pallas flash kernel on a TPU) for softmax, DNAS and HNAS, and NAP's and NON's Pallas
  kernels (``kernels.nap``), each against the path "auto" takes without it at these N (the
  quadratic one, or the linear-time one where ``fast_is_faster``: NAP and NON at N >= 2 head
  widths), NAP's and NON's also at ``QUADRATIC_SHAPES`` (N = 128, d = 512).

One line per case, in the order of their value (bf16 first, d = 128 first):

  kernel=ffn layout=mte dtype=bfloat16 d=128 n=128 models=50 xla_ms=... kernel_ms=... speedup=...

``speedup`` is the XLA path's time over the kernel's; ``gradient_error`` the kernel's gradients'
distance from the XLA path's (error norm over norm, every parameter and the input): a case whose
kernel fails to compile or run, or disagrees (``AGREEMENT``), is printed and not written, so
"auto" never takes it. With --out FILE the rules file is written
after every case, under this device's kind (``jax.devices()[0].device_kind``), so a run stopped
early keeps what it measured, and a rerun with the same FILE measures only the cases it lacks.
--merge FILE puts a file's measurements into the rules shipped with the library
(``normattn_jax/kernels/measured.json``), each device's replacing that device's, and exits.
The last line is ``cases=<measured in this run> of <total> failed=<failed or disagreeing>``.

  python benchmarks/kernel_speed.py [--sizes 128,32] [--dtypes bfloat16,float32] [--models 50]
      [--batch 32] [--repeats 10] [--layouts mte,bert]
      [--normalizations softmax,dnas,hnas,nap,non]
      [--out rules.json] [--merge rules.json]
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
from absl import app, flags

from normattn_jax.attention.module import fast_is_faster
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.blocks import TransformerBlock
from normattn_jax.kernels import rules as rules_lib
from normattn_jax.precision import BF16_TOLERANCES, DTYPES

NUM_HEADS = 4
# (N, d) where "auto" takes NAP's and NON's quadratic path (N below two head widths: Figs. 3 and
# 5 at d >= 512, N = 128), the shapes their kernels can pay at
QUADRATIC_SHAPES = ((128, 512),)
# How far a kernel's gradients may lie from the XLA path's (error norm over norm) for its
# measurement to count: twice the bf16 tolerance in bf16 (both paths round), 1% in float32
# (a GPU's float32 matmuls may run in TF32 on either path).
AGREEMENT = {"bfloat16": 2 * BF16_TOLERANCES["gradient"], "float32": 0.01}
_SIZES = flags.DEFINE_list("sizes", ["128", "32"], "d = N of the blocks measured.")
_DTYPES = flags.DEFINE_list("dtypes", ["bfloat16", "float32"], "Compute dtypes.")
_MODELS = flags.DEFINE_integer("models", 50, "Models vmapped together.", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", 32, "Sequences per model.", lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per program.", lower_bound=1)
_NORMALIZATIONS = flags.DEFINE_list("normalizations", ["softmax", "dnas", "hnas", "nap", "non"],
                                    "Normalisations whose fused path is measured.")
_LAYOUTS = flags.DEFINE_list("layouts", ["mte", "bert"],
                             "Block layouts whose feed-forward kernels are measured.")
_OUT = flags.DEFINE_string("out", "", "The rules file to write (and to resume from).")
_MERGE = flags.DEFINE_string("merge", "", "Merge this rules file into the shipped one; exit.")


def unfused_path(name: str, n: int, d: int) -> str:
  """The path "auto" takes without the fused one for ``n`` keys and queries at width ``d``
  (``fast_is_faster``)."""
  return "fast" if fast_is_faster(name, n, n, d // NUM_HEADS, causal=False) else "quadratic"


def cases(sizes, dtypes, normalizations, layouts) -> list:
  """Every case as ``(kernel, fields, (N, d), xla block, kernel block)``, in the order of their
  value: d = N for each size, then NAP's and NON's kernels at ``QUADRATIC_SHAPES``."""
  out = []
  for dtype in dtypes:
    block = lambda **kw: TransformerBlock(num_heads=NUM_HEADS, dtype=DTYPES[dtype], **kw)
    fused = lambda name, n, d: ("fused_attention",
                                {"normalization": name, "dtype": dtype, "num_keys": n,
                                 "head_dim": d // NUM_HEADS}, (n, d),
                                block(arch="mte", normalization=name, attention_module=(
                                    AttentionModuleSpec(unfused_path(name, n, d)))),
                                block(arch="mte", normalization=name,
                                      attention_module=AttentionModuleSpec("fused")))
    for d in sizes:
      ffn = lambda layout: ("ffn", {"layout": layout, "dtype": dtype, "d_model": d,
                                    "ffn_features": 4 * d}, (d, d),
                            block(arch=layout), block(arch=layout, ffn_implementation="pallas"))
      names = list(normalizations)
      out += [ffn(a) for a in layouts[:1]] + [fused(n, d, d) for n in names[:2]]
      out += [ffn(a) for a in layouts[1:]] + [fused(n, d, d) for n in names[2:]]
    out += [fused(name, n, d) for n, d in QUADRATIC_SHAPES for name in normalizations
            if name in ("nap", "non")]
  return out


def program(block, models: int, batch: int, n: int, d: int, dtype):
  """The compiled forward and backward of ``models`` blocks vmapped, and its arguments."""
  x = jax.random.normal(jax.random.key(0), (models, batch, n, d), dtype)
  keys = jax.random.split(jax.random.key(1), models)
  params = jax.vmap(lambda k, x: block.init(k, x))(keys, x)

  probe = jax.random.normal(jax.random.key(2), x.shape[1:], jnp.float32)

  def loss(p, x):  # a random direction: every gradient matters (a sum of squares of a
    return jnp.sum(block.apply(p, x).astype(jnp.float32) * probe)  # LayerNorm's is flat)
  step = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))
  return step.lower(params, x).compile(), (params, x)


def seconds(compiled, args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  return time.perf_counter() - start


def gradient_error(want, got) -> float:
  """The gradients' error norm over their norm (every parameter and the input, float32)."""
  flat = lambda tree: jnp.concatenate([jnp.ravel(x).astype(jnp.float32)
                                       for x in jax.tree.leaves(tree)])
  want, got = flat(want), flat(got)
  return float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want))


def measure(xla_block, kernel_block, n: int, d: int,
            dtype: str) -> tuple[float, float, float]:
  """Median seconds of the XLA and the kernel program, timed in turn after a warm-up call, and
  the kernel's gradient error against the XLA path's (``gradient_error``)."""
  programs = [program(b, _MODELS.value, _BATCH.value, n, d, DTYPES[dtype])
              for b in (xla_block, kernel_block)]
  results = [compiled(*args) for compiled, args in programs]
  error = gradient_error(*results)
  samples = ([], [])
  for _ in range(_REPEATS.value):
    for (compiled, args), sample in zip(programs, samples):
      sample.append(seconds(compiled, args))
  return statistics.median(samples[0]), statistics.median(samples[1]), error


def read(path: str) -> dict:
  if path and os.path.exists(path):
    with open(path) as f:
      return rules_lib.check_rules(json.load(f), path)
  return {"format": rules_lib.FORMAT, "devices": {}}


def write(path: str, tree: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(tree, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)


def main(argv):
  del argv
  if _MERGE.value:
    merged = rules_lib.merged(read(rules_lib.RULES_FILE), read(_MERGE.value))
    write(rules_lib.RULES_FILE, merged)
    print(f"merged {_MERGE.value} into {rules_lib.RULES_FILE}: devices "
          f"{sorted(merged['devices'])}")
    return
  for dtype in _DTYPES.value:
    if dtype not in DTYPES:
      raise app.UsageError(f"--dtypes: {dtype!r} is none of {tuple(DTYPES)}")
  for layout in _LAYOUTS.value:
    if layout not in ("mte", "bert"):
      raise app.UsageError(f"--layouts: {layout!r} is neither 'mte' nor 'bert'")
  sizes = [int(s) for s in _SIZES.value]
  if any(s % NUM_HEADS for s in sizes):
    raise app.UsageError(f"--sizes={sizes}: each must be a multiple of {NUM_HEADS} (the heads)")
  kind = jax.devices()[0].device_kind
  tree = read(_OUT.value)
  device = tree["devices"].setdefault(kind, {})
  device["source"] = (f"benchmarks/kernel_speed.py {' '.join(sys.argv[1:])}; jax "
                      f"{jax.__version__}; {datetime.date.today().isoformat()}")
  print(f"devices: {jax.devices()}; {_MODELS.value} models x batch {_BATCH.value}, "
        f"{NUM_HEADS} heads")
  todo = cases(sizes, _DTYPES.value, _NORMALIZATIONS.value, _LAYOUTS.value)
  done = failed = 0
  for kernel, fields, (n, d), xla_block, kernel_block in todo:
    entries = device.setdefault(kernel, [])
    if any(all(e[k] == v for k, v in fields.items()) for e in entries):
      continue
    name = f"kernel={kernel} " + " ".join(f"{k}={v}" for k, v in fields.items())
    try:
      xla_s, kernel_s, error = measure(xla_block, kernel_block, n, d, fields["dtype"])
    except Exception as err:  # a kernel this device cannot compile or run: not a rule
      failed += 1
      print(f"{name} failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}",
            flush=True)
      continue
    line = (f"{name} n={n} d={d} models={_MODELS.value} xla_ms={xla_s * 1e3:.3f} "
            f"kernel_ms={kernel_s * 1e3:.3f} speedup={xla_s / kernel_s:.3f} "
            f"gradient_error={error:.2e}")
    if not error <= AGREEMENT[fields["dtype"]]:  # a wrong kernel is never a faster one
      failed += 1
      print(f"{line} disagrees with the XLA path (tolerance {AGREEMENT[fields['dtype']]}): "
            f"not written", flush=True)
      continue
    entries.append(dict(fields, speedup=round(xla_s / kernel_s, 3),
                        xla_ms=round(xla_s * 1e3, 3), kernel_ms=round(kernel_s * 1e3, 3),
                        gradient_error=float(f"{error:.3g}"), models=_MODELS.value,
                        batch=_BATCH.value))
    done += 1
    print(line, flush=True)
    if _OUT.value:
      write(_OUT.value, tree)
  print(f"cases={done} of {len(todo)} failed={failed}")


if __name__ == "__main__":
  app.run(main)
