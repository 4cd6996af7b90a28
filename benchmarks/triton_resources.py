"""What each Pallas kernel asks of an NVIDIA GPU, found on any machine: its programs compiled to
machine code by the ``triton`` package, read for registers, spilled bytes and shared memory.

A kernel whose program needs more shared memory than the device has fails to launch, and one
that spills registers runs from local memory; neither shows on a CPU, where the kernels run in
Pallas' interpret mode. This traces the forward and backward of each kernel for CUDA
(``kernels.platform.tracing_for("cuda")``), takes the Triton IR of every program as Pallas
lowers it, and compiles it for --arch (90: H100 and H200) with the warps the kernel's
configuration gives it and one pipeline stage (``kernels.calls.compiler_params``). XLA compiles
the same IR with the Triton it is built with, so the figures are the ``triton`` package's
(its version is printed), a close guide and not the device's own account.

One line per program:

  kernel=nap dtype=bfloat16 n=128 head_width=128 program=_forward_kernel warps=8 registers=140
      spilled_bytes=0 shared_bytes=49152 shared_limit=232448 fits=yes

``spilled_bytes`` is ptxas' stack frame per thread (0: no spills); ``fits`` says whether the
shared memory is within the architecture's limit per block. Cases: NAP's and NON's attention
(``kernels.nap``) at --shapes (``n:head_width``, 4 heads), the feed-forward kernels
(``kernels.ffn``) at --widths (hidden layer 4d) in the MTE and BERT layouts, in each of
--dtypes. The last line is ``programs=<compiled> too_large=<over the limit> spilling=<...>``.
With --ir_only it only takes the programs' IR and counts them (no ``triton`` needed).

Needs ``pip install triton`` (its bundled ptxas; no GPU). Compiling a wide program takes ptxas
a minute on a laptop core.

  python benchmarks/triton_resources.py [--kernels nap,non,ffn] [--shapes 32:8,128:32,128:128]
      [--widths 32,128,512] [--dtypes bfloat16,float32] [--arch 90] [--ir_only]
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
from absl import app, flags

from normattn_jax.kernels import ffn, nap, platform
from normattn_jax.kernels.calls import compiler_params

NUM_HEADS = 4
# The largest shared memory a block may opt into, per compute capability (bytes).
SHARED_LIMITS = {80: 166_912, 86: 101_376, 89: 101_376, 90: 232_448}
CUDA = platform.Target("cuda", False, None)

FLAGS = flags.FLAGS
flags.DEFINE_list("kernels", ["nap", "non", "ffn"], "Kernels: nap, non, ffn.")
flags.DEFINE_list("shapes", ["32:8", "128:32", "128:128", "512:64"],
                  "n:head_width of the attention kernels' cases.")
flags.DEFINE_list("widths", ["32", "128", "512"], "d of the feed-forward kernels' cases.")
flags.DEFINE_list("dtypes", ["bfloat16", "float32"], "Compute dtypes.")
flags.DEFINE_integer("arch", 90, f"Compute capability x 10, one of {sorted(SHARED_LIMITS)}.")
flags.DEFINE_bool("ir_only", False, "Only take each program's Triton IR (no triton package).")


def triton_programs(fn, *args) -> list:
  """The Triton IR (text) of every Pallas program in ``fn(*args)`` lowered for CUDA, as
  ``(name, text)`` in the order Pallas lowered them.

  Pallas keeps the IR only inside the lowered module's custom calls, as bytecode; this catches
  it as text where Pallas' Triton lowering makes it (a function of jax's internals, named in
  the error if it moves)."""
  try:
    from jax._src.pallas.triton import pallas_call_registration as registration
  except ImportError as error:
    raise RuntimeError(f"jax {jax.__version__} has moved Pallas' Triton lowering: {error}")
  lower = registration.lowering.lower_jaxpr_to_triton_module
  programs = []

  def catch(*a, **kw):
    result = lower(*a, **kw)
    text = result.module.operation.get_asm(enable_debug_info=False)
    programs.append((re.search(r"tt\.func \w+ @(\w+)", text).group(1), text))
    return result
  registration.lowering.lower_jaxpr_to_triton_module = catch
  try:
    with platform.tracing_for("cuda"):
      jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
  finally:
    registration.lowering.lower_jaxpr_to_triton_module = lower
  return programs


def resources(text: str, num_warps: int, arch: int) -> dict:
  """Registers and stack bytes per thread (ptxas', through cuobjdump) and shared memory per
  block (Triton's) of one program's IR compiled for compute capability ``arch``."""
  import triton
  from triton.backends.compiler import GPUTarget
  params = compiler_params("cuda", False, num_warps=num_warps)  # as Pallas' call passes them
  with tempfile.TemporaryDirectory() as folder:
    source = os.path.join(folder, "program.ttir")
    with open(source, "w") as f:
      f.write(text)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": params.num_warps,
                                       "num_stages": params.num_stages})
    cubin = os.path.join(folder, "program.cubin")
    with open(cubin, "wb") as f:
      f.write(compiled.asm["cubin"])
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    usage = subprocess.run([os.path.join(tools, "cuobjdump"), "--dump-resource-usage", cubin],
                           capture_output=True, text=True, check=True).stdout
  found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
  if not found:
    raise RuntimeError(f"no resource usage in cuobjdump's output: {usage[-300:]}")
  return {"registers": int(found.group(1)), "spilled_bytes": int(found.group(2)),
          "shared_bytes": int(compiled.metadata.shared)}


def attention_case(kind: str, dtype, n: int, head_width: int):
  """NAP's or NON's kernel, forward and backward: ``(fn, args, num_warps)``."""
  x = jnp.zeros((2, n, NUM_HEADS, head_width), dtype)
  loss = lambda q, k, v: jnp.sum(nap.attention(q, k, v, kind=kind, eps=1e-3)
                                 .astype(jnp.float32))
  cfg = nap.make_config(kind, 1e-3, False, False, n, n, head_width, head_width, dtype, CUDA)
  return jax.value_and_grad(loss, argnums=(0, 1, 2)), (x, x, x), cfg.blocks.num_warps


def ffn_case(layout: str, dtype, d: int):
  """The feed-forward kernels of ``layout``, forward and backward: ``(fn, args, num_warps)``."""
  hidden, rows = 4 * d, 4096
  shapes = ((d, hidden), (1, hidden), (1, hidden), (1, hidden), (hidden, d), (1, d), (1, d),
            (1, d))
  params = ffn.Params(*(jnp.zeros(s, dtype) for s in shapes))
  loss = lambda x, p: jnp.sum(ffn.feed_forward(x, p, layout=layout, epsilon=1e-6)
                              .astype(jnp.float32))
  cfg = ffn.make_config(layout, 1e-6, rows, d, hidden, CUDA)
  return (jax.value_and_grad(loss, argnums=(0, 1)), (jnp.zeros((rows, d), dtype), params),
          cfg.num_warps)


def cases():
  """``(label, fn, args, num_warps)`` of every case the flags ask for."""
  for dtype in FLAGS.dtypes:
    for kind in [k for k in FLAGS.kernels if k in nap.KINDS]:
      for shape in FLAGS.shapes:
        n, width = (int(x) for x in shape.split(":"))
        yield (f"kernel={kind} dtype={dtype} n={n} head_width={width}",
               *attention_case(kind, jnp.dtype(dtype), n, width))
    if "ffn" in FLAGS.kernels:
      for d in FLAGS.widths:
        for layout in ffn.LAYOUTS:
          yield (f"kernel=ffn layout={layout} dtype={dtype} d={d}",
                 *ffn_case(layout, jnp.dtype(dtype), int(d)))


def main(argv):
  del argv
  unknown = set(FLAGS.kernels) - set(nap.KINDS) - {"ffn"}
  if unknown or FLAGS.arch not in SHARED_LIMITS:
    sys.exit(f"--kernels must be among {nap.KINDS + ('ffn',)} (got {sorted(unknown)}) and "
             f"--arch one of {sorted(SHARED_LIMITS)} (got {FLAGS.arch})")
  if FLAGS.ir_only:
    programs = [f"{label} program={name} ir_chars={len(text)}" for label, fn, args, _ in cases()
                for name, text in triton_programs(fn, *args)]
    print("\n".join(programs) + f"\nprograms={len(programs)}")
    return
  try:
    import triton
  except ImportError:
    sys.exit("this needs the triton package (pip install triton): it compiles the programs")
  limit = SHARED_LIMITS[FLAGS.arch]
  print(f"triton={triton.__version__} jax={jax.__version__} arch=sm_{FLAGS.arch} "
        f"shared_limit={limit}", flush=True)
  compiled = too_large = spilling = 0
  for label, fn, args, num_warps in cases():
    for name, text in triton_programs(fn, *args):
      used = resources(text, num_warps, FLAGS.arch)
      fits = used["shared_bytes"] <= limit
      compiled, too_large = compiled + 1, too_large + (not fits)
      spilling += used["spilled_bytes"] > 0
      print(f"{label} program={name} warps={num_warps} registers={used['registers']} "
            f"spilled_bytes={used['spilled_bytes']} shared_bytes={used['shared_bytes']} "
            f"shared_limit={limit} fits={'yes' if fits else 'no'}", flush=True)
  print(f"programs={compiled} too_large={too_large} spilling={spilling}")


if __name__ == "__main__":
  os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, said once
  app.run(main)
