"""Every compiled program of the library, exported for TPU and CUDA from any machine.

``jax.export`` lowers a jitted function for a platform the machine need not have: the StableHLO
an accelerator would compile. ``programs()`` lists the library's programs, each built small (the
shapes change no op): a sweep grid's chunk (``lax.scan`` over training steps, then the
evaluation) for the six NAP architectures and every registered normalisation on every
implementation it offers, in float32 and bfloat16; pre-training's training and evaluation steps
(UNAS, DNAS, HNAS); the fine-tuning grid's chunk; the Linen and NNX attention modules forward and
backward; a decode step with the key/value cache; the report card's measurement programs.
``check_exports(programs, platforms)`` exports each for each platform and reads the exported module:

* no host callback (``pure_callback``, ``io_callback``, ``jax.debug.print``) in a training
  step: found in the jaxpr by primitive and in the module by custom-call target
  (``CALLBACK_TARGET``: ``xla_ffi_python_cpu_callback`` and its GPU and partial variants);
* on CUDA, a program whose attention is ``implementation="fused"`` in bf16 (softmax attention
  with offsets: every fused path but NAP's and NON's kernels) contains cuDNN's
  flash-attention custom call, ``__cudnn$fmhaSoftmax`` (and ``__cudnn$fmhaSoftmaxBackward``
  where it is differentiated; ``CUDNN_FORWARD``), the names jax's
  ``cudnn/fused_attention_stablehlo.py`` lowers ``dot_product_attention(implementation=
  "cudnn")`` to: without it, XLA's composite fallback would run, several times slower and, for
  DNAS, with the offsets rounded into the logits;
* a Pallas kernel's custom call where one is claimed: on a TPU, jax's flash attention kernel
  (Mosaic's ``tpu_custom_call``, ``MOSAIC_TARGET``) in every "fused" program; the feed-forward
  kernels (``kernels.ffn``) in a grid program whose ``model.ffn_implementation`` is "pallas",
  and NAP's and NON's attention kernels (``kernels.nap``) in every "fused" program of theirs
  (Triton's ``__gpu$xla.gpu.triton`` on CUDA, ``TRITON_TARGET``);
* the dtypes are the configured ones: a float32 program has no bf16 ``dot_general``, a bf16 one
  has bf16 ``dot_general`` ops (the projections), and every ``exponential`` and ``log`` (the
  weight functions' and the losses') is float32 (``normattn_jax.precision``'s policy).

Which kernel ``attention/fused.py`` takes is decided while tracing, from the default device;
exported for CUDA here, tracing runs inside ``fused.tracing_for_cudnn`` and, where no cuDNN is
installed (jax asks the library for its version as it traces a cuDNN call), with jax's version
lookup answering ``ASSUMED_CUDNN_VERSION`` (``_cudnn_version_assumed``: only inside an export,
only where the real lookup fails). ``normattn-export-check`` is the command.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from typing import Callable, Iterable, Iterator, Optional, Sequence

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import fused as fused_lib
from normattn_jax.attention import registry as attention_registry
from normattn_jax.kernels import platform as kernel_platform
from normattn_jax.precision import DTYPES

PLATFORMS = ("tpu", "cuda")
# jax's cuDNN flash-attention custom calls (jax/_src/cudnn/fused_attention_stablehlo.py,
# get_custom_call_name without bias or dropout): the forward call, and the backward one of a
# differentiated program.
CUDNN_FORWARD = "__cudnn$fmhaSoftmax"
CUDNN_BACKWARD = "__cudnn$fmhaSoftmaxBackward"
CUDNN_TARGETS = (CUDNN_FORWARD, CUDNN_BACKWARD)
# The custom calls of Pallas kernels: Triton's on CUDA (like cuDNN's, without jax's
# compatibility guarantee, so exported with that check off), Mosaic's on a TPU.
TRITON_TARGET = "__gpu$xla.gpu.triton"
MOSAIC_TARGET = "tpu_custom_call"
# The custom-call targets of host callbacks: every target naming a callback (jax/_src/callback.py
# names them xla_ffi{_partial}_python_{cpu,gpu}_callback; older ones xla_python_*_callback and
# xla_buffer_python_*_callback).
CALLBACK_TARGET = re.compile(r"callback")
CALLBACK_PRIMITIVES = ("pure_callback", "io_callback", "debug_callback", "debug_print",
                       "callback")
# What jax's cuDNN wrapper is told the installed cuDNN is, where none is: 9.8, the oldest
# version whose flash attention jax 0.10 lowers every call of fused.py to.
ASSUMED_CUDNN_VERSION = 90800
COMPUTE_DTYPES = tuple(DTYPES)
GRID_ARCHS = ("bert", "mte", "nap", "non", "sum", "max")
PRETRAINING_SCHEMES = {"unas": "softmax", "dnas": "dnas", "hnas": "hnas"}


@dataclasses.dataclass(frozen=True)
class Program:
  """One compiled program of the library.

  - build: ``() -> (jitted function, abstract arguments)``, called afresh for each platform (the
    fused kernel is chosen while tracing, so no trace may be shared between platforms).
  - training: a training step, in which no host callback may run.
  - differentiated: its attention is differentiated (cuDNN's backward call is expected too).
  - ffn: its blocks' ``ffn_implementation`` ("pallas": the feed-forward kernels are expected).
  """
  name: str
  kind: str
  normalization: str
  implementation: str
  dtype: str
  build: Callable[[], tuple]
  training: bool = True
  differentiated: bool = True
  ffn: str = "xla"

  def expects_kernels(self, platform: str) -> tuple:
    """The Pallas kernels' custom calls its export must hold on ``platform``: the feed-forward
    kernels' where ``ffn`` is "pallas", and on a TPU the flash attention kernel wherever the
    attention is "fused" (``fused.kernel_for``)."""
    wanted = set()
    pallas = TRITON_TARGET if platform == "cuda" else MOSAIC_TARGET
    if self.ffn == "pallas" or (self.implementation == "fused" and self.pallas_attention):
      wanted.add(pallas)
    if (platform == "tpu" and self.implementation == "fused"
        and attention_registry.get(self.normalization).fused is not None):
      wanted.add(MOSAIC_TARGET)
    return tuple(sorted(wanted))

  def expects_cudnn(self, platform: str) -> bool:
    """Whether its CUDA export must hold cuDNN's call: "fused" in bf16, where ``kernel_for``
    takes cuDNN (float32 runs XLA's kernel, which cuDNN's flash attention does not take)."""
    return (platform == "cuda" and self.implementation == "fused" and self.dtype == "bfloat16"
            and attention_registry.get(self.normalization).fused is not None
            and not self.pallas_attention)

  @property
  def pallas_attention(self) -> bool:
    """Its fused attention is the normalisation's own Pallas kernel (``fused_own_kernel``), not
    softmax attention with offsets."""
    return attention_registry.get(self.normalization).fused_own_kernel


@dataclasses.dataclass(frozen=True)
class Result:
  """One program exported for one platform: ``problems`` empty when every check holds."""
  program: str
  kind: str
  platform: str
  problems: tuple
  seconds: float
  targets: tuple = ()


# ----- the checks, on the exported module's text -----

def custom_call_targets(module_text: str) -> list:
  """The custom-call targets in a StableHLO module's text, in order of appearance."""
  return re.findall(r"stablehlo\.custom_call @([\w$.\-]+)", module_text) + re.findall(
      r'call_target_name = "([^"]+)"', module_text)


def _element_type(tensor_type: str) -> str:
  return tensor_type.rsplit("x", 1)[-1] if "x" in tensor_type else tensor_type


def op_operand_types(module_text: str, op: str) -> list:
  """For each ``stablehlo.<op>`` in the text, the element types of its operands (from the
  op's function type ``(tensor<...>, ...) -> ...``)."""
  found = []
  for line in module_text.splitlines():
    if f"stablehlo.{op} " not in line and f'"stablehlo.{op}"' not in line:
      continue
    signature = line.rsplit(" : ", 1)[-1]
    operands = signature.split("->")[0] if "->" in signature else signature
    found.append([_element_type(t) for t in re.findall(r"tensor<([^>]*)>", operands)])
  return found


def callback_primitives(jaxpr) -> list:
  """The host-callback primitives anywhere in a (closed) jaxpr, its sub-jaxprs included."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in CALLBACK_PRIMITIVES or "callback" in eqn.primitive.name:
      found.append(eqn.primitive.name)
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      found.extend(callback_primitives(sub))
  return found


def dtype_problems(module_text: str, dtype: str) -> list:
  """Where the exported module computes in another dtype than configured
  (``normattn_jax.precision``): a float32 program with a bf16 matmul, a bf16 program without
  one, or an exponential or log (a weight function's, a loss's) below float32."""
  problems = []
  dots = op_operand_types(module_text, "dot_general")
  low = sum(any(t == "bf16" for t in types) for types in dots)
  if dtype == "float32" and low:
    problems.append(f"dot_general: {low} of {len(dots)} in bf16 in a float32 program")
  if dtype == "bfloat16" and not low:
    problems.append(f"dot_general: none of {len(dots)} in bf16 in a bfloat16 program")
  for op in ("exponential", "log"):
    narrow = [types for types in op_operand_types(module_text, op)
              if any(t in ("bf16", "f16") for t in types)]
    if narrow:
      problems.append(f"{op}: {len(narrow)} in {narrow[0][0]} (the policy keeps them float32)")
  return problems


# ----- exporting -----

@contextlib.contextmanager
def _cudnn_version_assumed() -> Iterator[None]:
  """jax's cuDNN wrapper asks the installed cuDNN for its version while it traces a call and
  raises "cuDNN is not detected" without one; the version only gates features this library does
  not use (packed layouts, multi-head latent attention, compute capability 10.3). Where the
  lookup fails, it answers ``ASSUMED_CUDNN_VERSION`` for the time of one export, restored after."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention
  original = cudnn_attention.check_cudnn_version
  try:
    original()
    installed = True
  except RuntimeError:  # "cuDNN is not detected."
    installed = False
  if installed:
    yield
    return
  cudnn_attention.check_cudnn_version = lambda: ASSUMED_CUDNN_VERSION
  try:
    yield
  finally:
    cudnn_attention.check_cudnn_version = original


@contextlib.contextmanager
def exporting_for(platform: str) -> Iterator[None]:
  """The trace-time choices of ``platform``, whatever this machine is: cuDNN's kernel for
  "cuda", never for "tpu" (``fused.tracing_for_cudnn``), and the Pallas kernels lowered for it
  (``kernels.platform.tracing_for``)."""
  with fused_lib.tracing_for_cudnn(platform == "cuda"), kernel_platform.tracing_for(platform):
    if platform == "cuda":
      with _cudnn_version_assumed():
        yield
    else:
      yield


def check_platforms(platforms: Sequence[str]) -> tuple:
  """``platforms`` as a tuple, refused (naming the value) unless each is one of ``PLATFORMS``."""
  platforms = tuple(platforms)
  unknown = [p for p in platforms if p not in PLATFORMS]
  if not platforms or unknown:
    raise ValueError(f"platforms={platforms!r}: each must be one of {PLATFORMS}")
  return platforms


def module_problems(program: Program, platform: str, text: str, targets: tuple) -> list:
  """What the exported module of ``program`` breaks: a callback's custom call in a training
  step, cuDNN's calls missing where the fused path claims them, dtypes other than configured."""
  problems = []
  callbacks = [t for t in targets if CALLBACK_TARGET.search(t)]
  if callbacks and program.training:
    problems.append(f"custom_call {callbacks}: a host callback in a training step")
  if program.expects_cudnn(platform):
    wanted = CUDNN_TARGETS if program.differentiated else (CUDNN_FORWARD,)
    missing = [t for t in wanted if t not in targets]
    if missing:
      problems.append(f"custom_call {missing} missing: XLA's fallback in place of cuDNN's "
                      f"fused attention")
  kernels = [t for t in program.expects_kernels(platform) if t not in targets]
  if kernels:
    problems.append(f"custom_call {kernels} missing: XLA's ops in place of a Pallas kernel")
  return problems + dtype_problems(text, program.dtype)


def export_one(program: Program, platform: str) -> Result:
  """``program`` exported for ``platform`` and checked (module docstring).

  Returns:
    The ``Result``, its ``problems`` naming the op of each check that failed; an export that
    raises is a problem too ("export: <error>").
  """
  began = time.perf_counter()
  problems = []
  targets = ()
  try:
    with exporting_for(platform):
      fn, args = program.build()
      if program.training:
        called = callback_primitives(jax.make_jaxpr(fn)(*args).jaxpr)
        if called:
          problems.append(f"host callback in a training step: {sorted(set(called))}")
      if not problems:
        disabled = [jax.export.DisabledSafetyCheck.custom_call(t)
                    for t in CUDNN_TARGETS + (TRITON_TARGET,)]
        exported = jax.export.export(fn, platforms=(platform,), disabled_checks=disabled)(*args)
        text = exported.mlir_module()
        targets = tuple(sorted(set(custom_call_targets(text))))
        problems.extend(module_problems(program, platform, text, targets))
  except Exception as err:  # the report names the program; the caller decides to raise
    problems.append(f"export: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
  return Result(program.name, program.kind, platform, tuple(problems),
                time.perf_counter() - began, targets)


def check_exports(programs: Iterable[Program], platforms: Sequence[str] = PLATFORMS,
          on_result: Optional[Callable[[Result], None]] = None) -> list:
  """Every program exported for every platform and checked.

  Args:
    programs: ``programs(...)`` or a selection of them.
    platforms: a subset of ``PLATFORMS``.
    on_result: called with each ``Result`` as it comes (for printing).

  Returns:
    The ``Result`` objects, program by program, platform by platform.
  """
  platforms = check_platforms(platforms)
  results = []
  for program in programs:
    for platform in platforms:
      results.append(export_one(program, platform))
      if on_result is not None:
        on_result(results[-1])
  return results


def failures(results: Sequence[Result]) -> list:
  """One line per failed (program, platform): the program, the platform and what failed."""
  return [f"{r.program} on {r.platform}: {problem}" for r in results for problem in r.problems]


def counts(results: Sequence[Result]) -> dict:
  """``{kind: {"programs", "exports", "failed"}}`` over the results."""
  out = {}
  for r in results:
    entry = out.setdefault(r.kind, {"programs": set(), "exports": 0, "failed": 0})
    entry["programs"].add(r.program)
    entry["exports"] += 1
    entry["failed"] += bool(r.problems)
  return {kind: dict(e, programs=len(e["programs"])) for kind, e in out.items()}


# ----- the programs -----

def implementations(name: str) -> tuple:
  """The implementations normalisation ``name`` offers: quadratic always, fast and fused where
  it has those paths."""
  norm = attention_registry.get(name)
  offered = {"quadratic": True, "fast": norm.fast is not None, "fused": norm.fused is not None}
  return tuple(implementation for implementation, has in offered.items() if has)


def config_dtypes(name: Optional[str], dtypes: Sequence[str]) -> tuple:
  """The dtypes a config may ask for with normalisation ``name``: float32 alone for one that
  needs it (``Normalization.needs_float32``; its configs refuse bfloat16)."""
  if name and attention_registry.get(name).needs_float32:
    return tuple(d for d in dtypes if d == "float32")
  return tuple(dtypes)


def grid_config(arch: str, normalization: Optional[str], implementation: str, dtype: str,
                ffn: str = "xla"):
  """A small sweep config of one arch (a sweep's programs have the same ops at any size)."""
  from normattn_jax.sweep import config as config_lib
  c = config_lib.base_config()
  c.archs = (arch,)
  if normalization is not None:
    c.attention.name = normalization
  c.learning_rates, c.num_seeds = (0.01,), 1
  c.task.seq_len = 16
  c.model.update(d_model=32, num_layers=1, num_heads=4, dtype=dtype,
                 attention_implementation=implementation, ffn_implementation=ffn)
  c.train.update(num_steps=2, eval_every=1, batch_size=4)
  c.eval.update(val_batches=1, case_set_size=4)
  config_lib.validate(c)
  return c


def _grid_build(arch: str, normalization: Optional[str], implementation: str, dtype: str,
                ffn: str = "xla"):
  def build():
    from normattn_jax.sweep import programs
    c = grid_config(arch, normalization, implementation, dtype, ffn)
    grid = programs.build_grid(programs.Setup(arch, c), 1, ahead=False)
    keys = jax.ShapeDtypeStruct((grid.padded, 2), jnp.uint32)
    hp = {name: jax.ShapeDtypeStruct((grid.padded,), jnp.float32)
          for name in programs.HYPERPARAMETERS}
    state = jax.eval_shape(grid.init, keys, hp, *grid.shared)
    return grid.chunk_program, (state, hp) + tuple(grid.shared)
  return build


def grid_cells(normalizations: Sequence[str], archs: Sequence[str] = GRID_ARCHS) -> list:
  """``(arch, normalisation or None)`` of the grid programs: each of ``archs`` with its own
  normalisation (None: the arch's; a pooling arch has none), and every normalisation asked for
  on ``SWAP_ARCH``, the layout a sweep's ``attention.name`` swaps them into (a normalisation
  changes no op outside the attention, so the other layouts add nothing to check)."""
  from normattn_jax.blocks import ARCHITECTURES
  cells = [(arch, None) for arch in archs]
  own = {ARCHITECTURES[SWAP_ARCH].normalization} if SWAP_ARCH in archs else set()
  cells += [(SWAP_ARCH, name) for name in normalizations if name not in own or not archs]
  return cells


SWAP_ARCH = "mte"


def grid_programs(normalizations: Sequence[str], dtypes: Sequence[str] = COMPUTE_DTYPES,
                  archs: Sequence[str] = GRID_ARCHS) -> list:
  """A sweep grid's chunk program (training steps and the evaluation) of each of
  ``grid_cells``, on each implementation its normalisation offers, in each dtype."""
  from normattn_jax.blocks import ARCHITECTURES
  out = []
  for arch, name in grid_cells(normalizations, archs):
    own = ARCHITECTURES[arch].normalization
    used = name or (own if isinstance(own, str) else None)
    label = used or ARCHITECTURES[arch].mixer
    for implementation in (implementations(used) if used else ("quadratic",)):
      for dtype in config_dtypes(used, dtypes):
        out.append(Program(f"grid/{arch}/{label}/{implementation}/{dtype}", "grid",
                           used or "softmax", implementation, dtype,
                           _grid_build(arch, name, implementation, dtype)))
  return out


FFN_ARCHS = ("mte", "bert")  # the two layouts of the feed-forward sub-block


def ffn_programs(dtypes: Sequence[str] = COMPUTE_DTYPES, archs: Sequence[str] = FFN_ARCHS
                 ) -> list:
  """A sweep grid's chunk with the feed-forward kernels (``model.ffn_implementation="pallas"``)
  for each layout, in each dtype."""
  from normattn_jax.blocks import ARCHITECTURES
  return [Program(f"grid/{arch}/{ARCHITECTURES[arch].normalization}/quadratic/{dtype}/pallas_ffn",
                  "grid", ARCHITECTURES[arch].normalization, "quadratic", dtype,
                  _grid_build(arch, None, "quadratic", dtype, "pallas"), ffn="pallas")
          for arch in archs for dtype in dtypes]


def tiny_pretraining_config(normalization: str, implementation: str, dtype: str):
  """A small pre-training config (ALBERT's ops at any size)."""
  from normattn_jax.pretrain.train import base_pretrain_config
  c = base_pretrain_config()
  c.model.update(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=16, dtype=dtype,
                 attention_implementation=implementation)
  c.model.attention.name = normalization
  c.data.update(vocab_size=64, max_seq_length=16, max_predictions_per_seq=3)
  c.train.update(batch_size=4, num_steps=4, warmup_steps=1)
  return c


def _pretraining_batch(c) -> dict:
  b, n, p = c.train.batch_size, c.data.max_seq_length, c.data.max_predictions_per_seq
  shape = lambda *s, dtype=jnp.int32: jax.ShapeDtypeStruct(s, dtype)
  return {"input_ids": shape(b, n), "input_mask": shape(b, n), "segment_ids": shape(b, n),
          "masked_lm_positions": shape(b, p), "masked_lm_ids": shape(b, p),
          "masked_lm_weights": shape(b, p, dtype=jnp.float32),
          "sentence_order_label": shape(b)}


def _pretraining_build(normalization: str, implementation: str, dtype: str, step: str):
  def build():
    from normattn_jax.pretrain import train as pretrain
    c = tiny_pretraining_config(normalization, implementation, dtype)
    pretrain.validate_pretrain_config(c)
    trainer = pretrain.Trainer(c, c.data.vocab_size)
    batch = _pretraining_batch(c)
    state = jax.eval_shape(trainer._init, jax.random.key(0), batch)
    if step == "train":
      return trainer.train_step, (state, batch)
    return trainer.eval_step, (state.params, batch)
  return build


def pretraining_programs(normalizations: Sequence[str], dtypes=("bfloat16",)) -> list:
  """Pre-training's training step and evaluation step for UNAS, DNAS and HNAS (or the
  normalisations asked for), on each implementation each offers."""
  out = []
  for name in normalizations:
    for implementation in implementations(name):
      for dtype in config_dtypes(name, dtypes):
        for step in ("train", "eval"):
          out.append(Program(f"pretrain/{name}/{implementation}/{dtype}/{step}", "pretrain",
                             name, implementation, dtype,
                             _pretraining_build(name, implementation, dtype, step),
                             training=step == "train", differentiated=step == "train"))
  return out


def _finetune_build(normalization: str, implementation: str, dtype: str):
  def build():
    from normattn_jax.finetune import encoders, task as task_lib, train as finetune
    from normattn_jax.models.albert import AlbertModel
    from normattn_jax.pretrain.train import model_config
    pc = tiny_pretraining_config(normalization, implementation, dtype)
    c = finetune.base_finetune_config()
    c.learning_rates, c.num_seeds = (1e-3,), 1
    c.train.update(batch_size=4, num_steps=2, warmup_steps=1, eval_every=1, eval_batch_size=4,
                   classifier_dropout=0.0)
    n, examples = pc.data.max_seq_length, 8
    split = {"input_ids": np.ones((examples, n), np.int32),
             "token_type_ids": np.zeros((examples, n), np.int32),
             "attention_mask": np.ones((examples, n), np.int32),
             "label": np.zeros((examples,), np.int32)}
    task = task_lib.FinetuneTask("export_check", "classification", 2, split, split,
                                 lambda predictions: {"accuracy": 0.0}, ("accuracy",))
    encoder = AlbertModel(model_config(pc, pc.data.vocab_size), dtype=DTYPES[dtype])
    # concrete arrays, since the grid places the pre-trained parameters on the devices (a few
    # KB here), but zeros: an export reads only their shapes and dtypes, which are traced with
    # this machine's kernels (a TPU's would not trace here)
    with kernel_platform.tracing_for("cpu"):
      shapes = jax.eval_shape(encoder.init, jax.random.key(0),
                              jnp.asarray(split["input_ids"][:1]))["params"]
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    start = encoders.StartingPoint(encoder, params, None, "export check", n)
    grid, _ = finetune.build_grid(c, task, start, 1, ahead=False)
    keys = jax.ShapeDtypeStruct((grid.padded, 2), jnp.uint32)
    per_model = {"learning_rate": jax.ShapeDtypeStruct((grid.padded,), jnp.float32),
                 "rows": jax.ShapeDtypeStruct((grid.padded, 1, 4), jnp.int32)}
    state = jax.eval_shape(grid.init, keys, per_model, *grid.shared)
    return grid.chunk_program, (state, per_model) + tuple(grid.shared)
  return build


def finetune_programs(normalizations: Sequence[str], dtypes=("float32",)) -> list:
  """The fine-tuning grid's chunk (training steps and the dev predictions) of an ALBERT encoder
  with a classification head (float32, as ``encoders`` builds it, on each implementation)."""
  return [Program(f"finetune/{name}/{implementation}/{dtype}", "finetune", name,
                  implementation, dtype, _finetune_build(name, implementation, dtype))
          for name in normalizations for implementation in implementations(name)
          for dtype in dtypes]


MODULE_SHAPE = (2, 16, 32)  # [batch, n, features]: 4 heads of 8


def _module_build(flavour: str, normalization: str, implementation: str, dtype: str):
  def build():
    x = jax.ShapeDtypeStruct(MODULE_SHAPE, jnp.dtype(dtype))
    if flavour == "linen":
      from normattn_jax.attention.module import MultiHeadAttention
      module = MultiHeadAttention(num_heads=4, normalization=normalization,
                                  implementation=implementation, dtype=jnp.dtype(dtype))
      params = jax.eval_shape(lambda: module.init(jax.random.key(0), jnp.zeros(MODULE_SHAPE)))

      def loss(p, inputs):
        return jnp.sum(module.apply(p, inputs).astype(jnp.float32))
      return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), (params, x)
    from flax import nnx
    from normattn_jax.nnx import MultiHeadAttention
    module = nnx.eval_shape(lambda: MultiHeadAttention(
        4, MODULE_SHAPE[-1], normalization=normalization, implementation=implementation,
        dtype=jnp.dtype(dtype), decode=False, rngs=nnx.Rngs(0)))
    graph, state = nnx.split(module)

    def loss(s, inputs):
      return jnp.sum(nnx.merge(graph, s)(inputs).astype(jnp.float32))
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), (state, x)
  return build


def module_programs(normalizations: Sequence[str], dtypes: Sequence[str] = COMPUTE_DTYPES
                    ) -> list:
  """The Linen and NNX ``MultiHeadAttention`` forward and backward (the gradient of a sum of
  its outputs for the parameters and the inputs)."""
  return [Program(f"{flavour}/{name}/{implementation}/{dtype}", flavour, name, implementation,
                  dtype, _module_build(flavour, name, implementation, dtype))
          for flavour in ("linen", "nnx") for name in normalizations
          for implementation in implementations(name) for dtype in dtypes]


def _decode_build(normalization: str, implementation: str, dtype: str):
  def build():
    from normattn_jax.attention.module import MultiHeadAttention
    module = MultiHeadAttention(num_heads=4, normalization=normalization, decode=True,
                                implementation=implementation, dtype=jnp.dtype(dtype))
    variables = jax.eval_shape(lambda: module.init(jax.random.key(0), jnp.zeros(MODULE_SHAPE)))
    step = jax.ShapeDtypeStruct(MODULE_SHAPE[:1] + (1,) + MODULE_SHAPE[2:], jnp.dtype(dtype))

    def decode(v, token):
      return module.apply(v, token, mutable=["cache"])
    return jax.jit(decode), (variables, step)
  return build


def decode_programs(normalizations: Sequence[str], dtypes: Sequence[str] = COMPUTE_DTYPES
                    ) -> list:
  """One decode step of the Linen module with its key/value cache, for the normalisations that
  decode (each query's weights its own logits' alone), on quadratic and, where offered, fused
  (``implementation="fast"`` takes no dense mask, which the cache is)."""
  from normattn_jax.attention.module import check_decodable
  out = []
  for name in normalizations:
    try:
      check_decodable(name)
    except ValueError:
      continue
    for implementation in implementations(name):
      if implementation == "fast":
        continue
      for dtype in dtypes:
        out.append(Program(f"decode/{name}/{implementation}/{dtype}", "decode", name,
                           implementation, dtype, _decode_build(name, implementation, dtype),
                           training=False, differentiated=False))
  return out


def _card_build(normalization: str, measure: str):
  def build():
    from normattn_jax.card import lm as card_lm
    sizes = card_lm.LM_SIZES["smoke"]
    model = card_lm.build_model(attention_registry.AttentionSpec.of(normalization), sizes, 32)
    losses, probe = card_lm.measure_programs(model)
    params = jax.eval_shape(lambda: model.init(
        jax.random.key(0), jnp.zeros((sizes.train_len,), jnp.int32)))["params"]
    windows = jax.ShapeDtypeStruct((2, sizes.train_len), jnp.int32)
    return (losses if measure == "losses" else probe), (params, windows)
  return build


def card_programs(normalizations: Sequence[str]) -> list:
  """The report card's diagnostics' programs on a causal LM (``card_lm.measure_programs``):
  the per-position losses and the probe of weights and block outputs."""
  return [Program(f"card/{name}/{measure}", "card", name, "quadratic", "float32",
                  _card_build(name, measure), training=False, differentiated=False)
          for name in normalizations for measure in ("losses", "probe")
          if attention_registry.get(name).causal_safe]


KINDS = ("grid", "pretrain", "finetune", "linen", "nnx", "decode", "card")


def programs(normalizations: Optional[Sequence[str]] = None,
             kinds: Sequence[str] = KINDS) -> list:
  """The library's programs for ``normalizations`` (default: every registered one, and the
  grids of the six archs at their own normalisations; pre-training and fine-tuning default to
  UNAS, DNAS and HNAS, the DNAS paper's schemes). Named normalisations (a plugin's) get their
  own programs alone.

  Args:
    normalizations: registered names; a plugin's are registered once its module is imported.
    kinds: a subset of ``KINDS``.

  Returns:
    The ``Program`` objects, not yet built.

  Raises:
    ValueError: for an unknown normalisation or kind, before anything is traced.
  """
  unknown = [k for k in kinds if k not in KINDS]
  if unknown:
    raise ValueError(f"kinds={tuple(kinds)!r}: {unknown} not among {KINDS}")
  names = tuple(normalizations) if normalizations else attention_registry.names()
  for name in names:
    attention_registry.get(name)  # refuses an unknown name, listing the registered ones
  schemes = tuple(normalizations) if normalizations else tuple(PRETRAINING_SCHEMES.values())
  archs = () if normalizations else GRID_ARCHS
  makers = {"grid": lambda: grid_programs(names, archs=archs) + (ffn_programs() if archs
                                                                   else []),
            "pretrain": lambda: pretraining_programs(schemes),
            "finetune": lambda: finetune_programs(schemes),
            "linen": lambda: [p for p in module_programs(names) if p.kind == "linen"],
            "nnx": lambda: [p for p in module_programs(names) if p.kind == "nnx"],
            "decode": lambda: decode_programs(names), "card": lambda: card_programs(names)}
  return [program for kind in kinds for program in makers[kind]()]
