"""Every compiled program of the library exports for TPU and CUDA (``cli.exports``):
without a host callback in a training step, with cuDNN's fused attention in the CUDA export of
every bf16 "fused" program, the Pallas kernels where claimed (the TPU flash attention of every
"fused" program, the feed-forward kernels), and in the dtypes configured. ``make test`` exports
a subset that reaches every kind of program and every check; ``make test-all`` all of them. The
checks fail where they should: a plugin with a debug print, a fused export traced without cuDNN,
a float32 program with a bf16 matmul, a Pallas kernel missing."""
import contextlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from normattn_jax.attention import fused as fused_lib
from normattn_jax.attention.registry import Normalization, register, unregister
from normattn_jax.attention.weights import softmax_weights
from normattn_jax.cli import exports

from helpers import subprocess_env

# the normalisations registered when the list was made (other test files register their own
# when they are collected, after this one)
LISTED = exports.attention_registry.names()
PROGRAMS = {p.name: p for p in exports.programs()}
# One of each kind, and the cuDNN check on DNAS's two-call offsets, HNAS's two halves and the
# sink's extra key; float32 (fine-tuning, the card) and bf16. (Pre-training's evaluation step
# exports as its training step does; DNAS's offsets are the grid's.)
FAST = {"grid/mte/dnas/fused/bfloat16", "pretrain/hnas/fused/bfloat16/train",
        "finetune/softmax/quadratic/float32", "linen/sink/fused/bfloat16",
        "nnx/softmax/fused/bfloat16", "decode/softmax/fused/bfloat16", "card/softmax/probe",
        "grid/mte/softmax/quadratic/bfloat16/pallas_ffn"}


def test_the_list_covers_every_kind_normalisation_and_implementation():
  names = set(PROGRAMS)
  assert {p.kind for p in PROGRAMS.values()} == set(exports.KINDS)
  assert FAST <= names
  for name in LISTED:
    for implementation in exports.implementations(name):
      for dtype in exports.COMPUTE_DTYPES:
        in_grid = any(n.startswith("grid/") and f"/{name}/{implementation}/{dtype}" in n
                      for n in names)
        # a sweep config refuses bf16 for a normalisation that needs float32
        assert in_grid == (dtype in exports.config_dtypes(name, [dtype])), (
            name, implementation, dtype)
        assert f"linen/{name}/{implementation}/{dtype}" in names
        assert f"nnx/{name}/{implementation}/{dtype}" in names
  for arch in exports.GRID_ARCHS:
    assert any(n.startswith(f"grid/{arch}/") for n in names), arch
  for scheme in ("softmax", "dnas", "hnas"):
    assert f"pretrain/{scheme}/fused/bfloat16/train" in names
  assert not any(n.startswith(("decode/dnas", "decode/hnas", "card/dnas")) for n in names)
  for arch in exports.FFN_ARCHS:
    for dtype in exports.COMPUTE_DTYPES:
      assert PROGRAMS[f"grid/{arch}/softmax/quadratic/{dtype}/pallas_ffn"].ffn == "pallas"


@pytest.mark.fast_subset(lambda params: params["name"] in FAST)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_exports_for_tpu_and_cuda(name):
  results = exports.check_exports([PROGRAMS[name]])
  assert [r.platform for r in results] == list(exports.PLATFORMS)
  assert not exports.failures(results)
  cuda = results[-1]
  if PROGRAMS[name].expects_cudnn("cuda"):
    assert exports.CUDNN_FORWARD in cuda.targets
  else:
    assert not any(t.startswith("__cudnn") for t in cuda.targets)
  assert not any(t.startswith("__cudnn") for t in results[0].targets)  # never on a TPU
  for result, platform in zip(results, exports.PLATFORMS):
    assert set(PROGRAMS[name].expects_kernels(platform)) <= set(result.targets)


def test_without_tracing_for_cudnn_the_fused_export_is_caught(monkeypatch):
  """The check reads the export: traced as on a machine without cuDNN, "fused" is XLA's
  fallback, named."""
  monkeypatch.setattr(fused_lib, "tracing_for_cudnn", lambda cudnn=True: contextlib.nullcontext())
  monkeypatch.setattr(fused_lib, "cudnn_device", lambda: False)
  [result] = exports.check_exports([PROGRAMS["linen/dnas/fused/bfloat16"]], ("cuda",))
  assert result.problems and "__cudnn$fmhaSoftmax" in result.problems[0]
  assert "XLA's fallback" in result.problems[0]


def printing_softmax(logits, mask):
  jax.debug.print("logits {}", logits.max())
  return softmax_weights(logits, mask)


def test_a_host_callback_in_a_training_step_is_named():
  register(Normalization("printing_softmax", printing_softmax))
  try:
    programs = exports.programs(["printing_softmax"], kinds=("linen",))
    results = exports.check_exports(programs[:1])
  finally:
    unregister("printing_softmax")
  lines = exports.failures(results)
  assert len(lines) == 2
  for line, platform in zip(lines, exports.PLATFORMS):
    assert line.startswith(f"linen/printing_softmax/quadratic/float32 on {platform}: ")
    assert "host callback in a training step: ['debug_print']" in line


def exported_text(fn, *args):
  return jax.export.export(jax.jit(fn), platforms=("tpu",))(*args).mlir_module()


def test_dtype_problems_name_the_op():
  x32 = jax.ShapeDtypeStruct((4, 4), jnp.float32)
  x16 = jax.ShapeDtypeStruct((4, 4), jnp.bfloat16)
  half_matmul = exported_text(lambda a: (a.astype(jnp.bfloat16) @ a.astype(jnp.bfloat16)), x32)
  assert exports.dtype_problems(half_matmul, "float32") == [
      "dot_general: 1 of 1 in bf16 in a float32 program"]
  assert exports.dtype_problems(half_matmul, "bfloat16") == []
  assert exports.dtype_problems(exported_text(lambda a: a @ a, x32), "bfloat16") == [
      "dot_general: none of 1 in bf16 in a bfloat16 program"]
  narrow_exp = exported_text(lambda a: jnp.exp(a @ a), x16)
  assert exports.dtype_problems(narrow_exp, "bfloat16") == [
      "exponential: 1 in bf16 (the policy keeps them float32)"]


def test_bad_requests_are_refused_before_anything_is_traced():
  with pytest.raises(ValueError, match="one of .*got .no_such_normalisation."):
    exports.programs(["no_such_normalisation"])
  with pytest.raises(ValueError, match=r"kinds=\('grids',\)"):
    exports.programs(kinds=("grids",))
  with pytest.raises(ValueError, match=r"platforms=\('rocm',\): each must be one of"):
    exports.check_exports([], ("rocm",))


def test_the_command_checks_a_plugin_and_names_what_fails(tmp_path):
  """One command checks a user's normalisation; a callback in it fails with the program, the
  op and the platform named."""
  (tmp_path / "my_norms.py").write_text(
      "import jax\n"
      "from normattn_jax.attention.registry import Normalization, register\n"
      "from normattn_jax.attention.weights import softmax_weights\n"
      "def noisy(logits, mask):\n"
      "  jax.debug.print('{}', logits.sum())\n"
      "  return softmax_weights(logits, mask)\n"
      "register(Normalization('my_softmax', softmax_weights))\n"
      "register(Normalization('my_noisy', noisy))\n")
  env = subprocess_env(tmp_path)
  command = [sys.executable, "-m", "normattn_jax.cli.export_check",
             "--plugins=my_norms", "--kinds=nnx", "--platforms=cuda"]
  good = subprocess.run(command + ["--normalization=my_softmax"], env=env, capture_output=True,
                        text=True, timeout=300)
  assert good.returncode == 0, good.stderr[-2000:]
  assert "2 programs x 1 platforms (cuda)" in good.stdout
  assert re.search(r"nnx +2 programs +2 exports +0 failed", good.stdout)
  bad = subprocess.run(command + ["--normalization=my_noisy"], env=env, capture_output=True,
                       text=True, timeout=300)
  assert bad.returncode == 1
  assert ("FAILED nnx/my_noisy/quadratic/float32 on cuda: host callback in a training step: "
          "['debug_print']") in bad.stderr


def test_tracing_for_a_platform_decides_the_kernel_whatever_the_machine():
  """Exported for CUDA from a CPU, or for a TPU from a GPU: the platform's kernel, restored
  after."""
  machine = fused_lib.kernel_for(jnp.bfloat16, 64)
  with fused_lib.tracing_for_cudnn():
    assert fused_lib.kernel_for(jnp.bfloat16, 64) == "cudnn"
    assert fused_lib.kernel_for(jnp.float32, 64) == "xla"  # cuDNN's flash attention: bf16/fp16
    with fused_lib.tracing_for_cudnn(False):
      assert fused_lib.kernel_for(jnp.bfloat16, 64) == "xla"
    assert fused_lib.kernel_for(jnp.bfloat16, 64) == "cudnn"
  assert fused_lib.kernel_for(jnp.bfloat16, 64) == machine


def test_the_cudnn_version_stand_in_lives_only_inside_an_export():
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention
  before = cudnn_attention.check_cudnn_version
  [result] = exports.check_exports([PROGRAMS["linen/softmax/fused/bfloat16"]], ("cuda",))
  assert not result.problems and exports.CUDNN_BACKWARD in result.targets
  assert cudnn_attention.check_cudnn_version is before


def test_a_missing_pallas_kernel_is_named():
  """The TPU flash kernel in a fused program, Triton's call where the feed-forward kernels are
  claimed: their absence is a problem (the export held XLA's ops instead)."""
  ffn = PROGRAMS["grid/mte/softmax/quadratic/float32/pallas_ffn"]
  assert exports.module_problems(ffn, "cuda", "", ()) == [
      "custom_call ['__gpu$xla.gpu.triton'] missing: XLA's ops in place of a Pallas kernel"]
  fused_program = PROGRAMS["linen/softmax/fused/float32"]
  assert exports.module_problems(fused_program, "tpu", "", ()) == [
      "custom_call ['tpu_custom_call'] missing: XLA's ops in place of a Pallas kernel"]
  assert exports.module_problems(fused_program, "cuda", "", ()) == []


def test_a_callback_custom_call_is_named_even_past_the_jaxpr():
  """The module's custom calls are read too (a callback a lowering rule adds, not a primitive)."""
  program = PROGRAMS["linen/softmax/quadratic/float32"]
  for target in ("xla_ffi_python_gpu_callback", "xla_ffi_partial_python_cpu_callback",
                 "xla_python_cpu_callback"):
    assert exports.module_problems(program, "cuda", "", (target,)) == [
        f"custom_call ['{target}']: a host callback in a training step"]
  assert exports.module_problems(program, "cuda", "", ("__cudnn$fmhaSoftmax",)) == []


@pytest.mark.slow  # a grid, a pre-training and a fine-tuning exported: a minute and more
def test_a_plugin_exports_on_every_kind_and_an_empty_check_is_refused(tmp_path):
  """A plugin's normalisation, causal-safe or not, checked on every kind of program: each kind
  exports on both platforms (a card has no LM, so no program, for one that is not
  causal-safe, which the command says); a check that would check nothing is refused."""
  (tmp_path / "probe_norms.py").write_text(
      "from normattn_jax.attention.registry import Normalization, register\n"
      "from normattn_jax.attention.weights import softmax_weights\n"
      "register(Normalization('probe_safe', softmax_weights, causal_safe=True))\n"
      "register(Normalization('probe_unsafe', softmax_weights))\n")
  env = subprocess_env(tmp_path)
  command = [sys.executable, "-m", "normattn_jax.cli.export_check",
             "--plugins=probe_norms", "--quiet"]
  for name, kinds in (("probe_safe", exports.KINDS),
                      ("probe_unsafe", [k for k in exports.KINDS if k != "card"])):
    done = subprocess.run(command + [f"--normalization={name}"], env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    for kind in kinds:
      assert re.search(rf"{kind} +\d+ programs +\d+ exports +0 failed", done.stdout), kind
  assert re.search(r"card +0 programs: none for probe_unsafe", done.stdout), done.stdout
  empty = subprocess.run(command + ["--normalization=probe_unsafe", "--kinds=card"], env=env,
                         capture_output=True, text=True, timeout=300)
  assert empty.returncode == 1 and "no program of the kinds ['card'] for probe_unsafe" in (
      empty.stderr), empty.stderr[-2000:]
