"""The normalisation registry: one ``Normalization`` object per name, carrying all that differs.

The attention module, the blocks, the config validation, the benchmarks and the command lines
look a name up here instead of testing for it, so a normalisation registered from user code
(``register(Normalization(...))``) works everywhere a built-in one does.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from normattn_jax.attention import causality
from normattn_jax.attention import fast as fast_lib
from normattn_jax.attention import fused as fused_lib
from normattn_jax.attention import weights as weights_lib
from normattn_jax.attention.numerics import NAP_EPSILON
from normattn_jax.kernels import nap as nap_kernels
from normattn_jax.registry import Registry
from normattn_jax.validation import Option, integer, number

Array = jax.Array
QUADRATIC_LOGITS_LIMIT = 1 << 28  # 1 GiB of float32 logits
# The names a normalisation's functions already take: no option may take them.
RESERVED = frozenset({"logits", "mask", "q", "k", "v", "query_mask", "key_mask", "causal",
                      "block_size"})


def _identity(x: Array) -> Array:
  """The default ``HeadParam.constrain``: the stored value is the one used."""
  return x


def straight_through_clip(u: Array, low: float = 0.0, high: float = 1.0) -> Array:
  """``clip(u)`` in the forward pass, identity gradient: a parameter kept in [low, high] that is
  never stuck at a bound (the projection of a constrained optimiser, without its extra step).

  Args:
    u: the stored parameter (any shape, floating point).
    low: the lower bound.
    high: the upper bound.

  Returns:
    ``clip(u, low, high)``, of ``u``'s shape and dtype, whose gradient is that of ``u``.
  """
  return u + jax.lax.stop_gradient(jnp.clip(u, low, high) - u)


@dataclasses.dataclass(frozen=True)
class HeadParam:
  """A learned scalar per head. ``init(options)`` gives its flax initialiser from the
  normalisation's resolved options (so HNAS's u starts at ``hybrid_init``); ``constrain`` maps
  the stored value to the used one (HNAS keeps u in [0, 1]); ``per_layer``: a model sharing its
  layers' parameters (ALBERT) still keeps one per layer application, as
  ``<name>s [layers, heads]``."""
  name: str
  init: Callable[[Mapping[str, Any]], Callable]
  constrain: Callable[[Array], Array] = _identity
  per_layer: bool = False


def never(q_len: int, k_len: int, head_dim: int, causal: bool, num_logits: int) -> bool:
  """``fast_pays_off`` of a normalisation whose fast path never beats the quadratic one.

  Args:
    q_len: the number of queries (ignored).
    k_len: the number of keys (ignored).
    head_dim: the size of each head (ignored).
    causal: whether the attention is causal (ignored).
    num_logits: the number of logits per head (ignored).

  Returns:
    False.
  """
  return False


@dataclasses.dataclass(frozen=True)
class Normalization:
  """Everything that makes one attention normalisation differ from another.

  - ``weights(logits, mask, **params, **options)``: ``logits [..., heads, q, k] -> weights``; the
    per-head params arrive shaped ``[heads, 1, 1]``.
  - ``fast(q, k, v, *, query_mask, key_mask, causal, block_size, **params, **options)``: the
    exact path that never forms the weights (``[..., h, n, d]`` arrays), or None.
  - params: the per-head parameters (``HeadParam``), in the module's params tree by name.
  - options: its settings (``Option``), passed by name to ``weights`` and ``fast`` (unless
    ``init_only``) and to every ``HeadParam.init``; an ``AttentionSpec`` sets them.
  - scale_logits: divide the logits by sqrt(head_dim) unless the module says otherwise.
  - head_norm: whether the MTE layout's LayerNorm over the concatenated heads applies.
  - ``fast_pays_off(q_len, k_len, head_dim, causal, num_logits)``: ``implementation="auto"``'s rule.
  - ``fused(q, k, v, *, mask, query_mask, key_mask, causal, block_size, **params, **options)``:
    the path through ``jax.nn.dot_product_attention`` (``fused.py``; ``[..., n, h, d]`` arrays, the
    per-head params shaped ``[heads]``), for the normalisations that are softmax attention with
    per-key offsets; None where the weights are no such thing.
  - fused_auto_kernels: the kernels (``fused.KERNELS``) on which ``implementation="auto"`` takes
    the fused path; () never.
  - fused_own_kernel: ``fused`` is the normalisation's own Pallas kernel (Triton on a GPU,
    Mosaic on a TPU: NAP's and NON's, ``kernels.nap``), not softmax attention handed to
    ``fused.py``; the export check expects its calls by this.
  - normalizes_over_queries: each key's weights are also normalised over the queries (DNAS, HNAS,
    Sinkhorn), so a query's row depends on the other queries: no step-by-step decoding with a
    key/value cache, and padded queries must be masked.
  - causal_safe: under a causal mask the output at a position depends on no later input: each
    query's weights depend on its own row of logits alone (as softmax's, NAP's, sigmoid's), so a
    masked key's weight and gradient are exactly 0 (``causality.future_dependence`` measures it).
    Causal calls of a normalisation without it (the flag, or a concrete causal mask) are refused
    unless the caller passes ``allow_future_leak=True`` (``causality.check_causal``). False by
    default: a plugin says so once it is known, as a wrong True would let a decoder see its
    future without a word. Never True with ``normalizes_over_queries``.
  - needs_float32: why a model with this normalisation must compute in float32 (a config asking
    for bfloat16 is refused with it, ``normattn_jax.precision``); None: bf16 keeps it within
    ``precision.BF16_TOLERANCES``.
  - paper: ``(citation, address)`` of the paper that defines it, e.g. ``("Ding et al. 2020",
    "https://arxiv.org/abs/2009.14308")``, for the tables of the docs
    (``attention.properties``); None for none.
  """
  name: str
  weights: Callable[..., Array]
  fast: Optional[Callable[..., Array]] = None
  params: tuple = ()
  options: tuple = ()
  scale_logits: bool = True
  head_norm: bool = True
  fast_pays_off: Callable[..., bool] = never
  normalizes_over_queries: bool = False
  fused: Optional[Callable[..., Array]] = None
  fused_auto_kernels: tuple = ()
  fused_own_kernel: bool = False
  needs_float32: Optional[str] = None
  paper: Optional[tuple] = None
  causal_safe: bool = False

  @property
  def param_names(self) -> tuple:
    """The names of the per-head parameters (``params``), in order.

    Returns:
      A tuple of strings.
    """
    return tuple(p.name for p in self.params)

  @property
  def option_names(self) -> tuple:
    """The names of the options, in order.

    Returns:
      A tuple of strings.
    """
    return tuple(o.name for o in self.options)

  def resolve_options(self, given: Mapping[str, Any] = ()) -> dict:
    """Every option's value: the given ones checked, the others at their defaults.

    Args:
      given: option values by name (e.g. an ``AttentionSpec``'s).

    Returns:
      ``{option name: value}`` for every option, in order.

    Raises:
      ValueError: naming the normalisation, the option and the value, for an option it does
        not have or a value its rule refuses.
    """
    given = dict(given)
    unknown = sorted(set(given) - set(self.option_names))
    if unknown:
      raise ValueError(f"normalization {self.name!r} has no option {unknown[0]!r} (given "
                       f"{given[unknown[0]]!r}); its options are {self.option_names}")
    resolved = {}
    for option in self.options:
      value = given.get(option.name, option.default)
      problem = option.refusal(value)
      if problem:
        raise ValueError(f"normalization {self.name!r}: option {option.name} {problem}, got "
                         f"{value!r}")
      resolved[option.name] = value
    return resolved

  def function_options(self, options: Optional[Mapping[str, Any]] = None) -> dict:
    """The options ``weights`` and ``fast`` take (``init_only`` ones aside), resolved.

    Args:
      options: option values by name; None or missing ones: the defaults.

    Returns:
      ``{name: value}`` for each option that is not ``init_only``.
    """
    resolved = self.resolve_options(options or {})
    return {o.name: resolved[o.name] for o in self.options if not o.init_only}

  def initial_params(self, num_heads: int, options: Optional[Mapping[str, Any]] = None,
                     dtype=jnp.float32) -> dict:
    """The per-head parameters at initialisation, outside a module (e.g. for benchmarks).

    Args:
      num_heads: the number of heads.
      options: option values by name (e.g. ``hybrid_init``); None or missing ones: defaults.
      dtype: the parameters' dtype.

    Returns:
      ``{param name: array [num_heads]}``, initialised with a fixed random key.
    """
    key, resolved = jax.random.key(0), self.resolve_options(options or {})
    return {p.name: p.init(resolved)(key, (num_heads,), dtype) for p in self.params}

  def attention_weights(self, logits: Array, mask: Optional[Array], params: Mapping[str, Array],
                        options: Optional[Mapping[str, Any]] = None) -> Array:
    """``weights`` with ``[heads]`` params broadcast over queries and keys.

    Args:
      logits: floating-point logits, shape ``[..., heads, q, k]``.
      mask: boolean, broadcastable to ``logits``, True = attend; or None.
      params: ``{param name: array [heads]}``, holding every name in ``param_names``.
      options: option values by name; None or missing ones: the defaults.

    Returns:
      The weights, of ``logits``' shape and dtype.

    Raises:
      ValueError: if a per-head parameter is missing, an option is refused, or the weight
        function answers in another shape than the logits' (checked as it is traced: a
        ``[..., q, 1]`` answer would otherwise be broadcast over the keys without a word).
    """
    weights = self.weights(logits, mask, **_per_head(self, params),
                           **self.function_options(options))
    if jnp.shape(weights) != jnp.shape(logits):
      raise ValueError(f"normalization {self.name!r}: its weight function returned weights of "
                       f"shape {jnp.shape(weights)} for logits of shape {jnp.shape(logits)}; "
                       f"it must return one weight per logit")
    return weights.astype(logits.dtype)  # float32 per-head params must not promote bf16 logits

  def check_causal(self, *, causal: bool = False, mask=None, allow_future_leak: bool = False,
                   name: Optional[str] = None, what: Optional[str] = None) -> None:
    """Refuse a causal call (``causal``, or a concrete dense causal mask) unless the
    normalisation is causal-safe or ``allow_future_leak`` (``causality.check_causal``).

    Args:
      causal: the call's causal flag.
      mask: the call's dense mask, or None (a traced one is not read).
      allow_future_leak: accept the leak.
      name: how to name it in the message (e.g. its spec); None: its name.
      what: how to name a causal call in the message (default "causal=True").

    Raises:
      ValueError: naming it, the causal call and the opt-in.
    """
    causality.check_causal(name or self.name, self.causal_safe, self.normalizes_over_queries,
                           causal=causal, mask=mask, allow_future_leak=allow_future_leak,
                           safe=causal_safe_names(), what=what)

  def fast_attention(self, q: Array, k: Array, v: Array, params: Mapping[str, Array],
                     options: Optional[Mapping[str, Any]] = None, *, query_mask=None,
                     key_mask=None, causal: bool = False,
                     block_size: int = fast_lib.DEFAULT_BLOCK,
                     allow_future_leak: bool = False) -> Array:
    """``fast`` with ``[heads]`` params broadcast over positions and features.

    Args:
      q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
      k: keys, shape ``[..., h, n_k, d]``.
      v: values, shape ``[..., h, n_k, e]``.
      params: ``{param name: array [h]}``, holding every name in ``param_names``.
      options: option values by name; None or missing ones: the defaults.
      query_mask: boolean ``[..., n_q]``, True = valid query; or None.
      key_mask: boolean ``[..., n_k]``, True = valid key; or None.
      causal: query i sees only the keys j <= i + n_k - n_q.
      block_size: queries per block of the blockwise paths (the linear ones ignore it).
      allow_future_leak: a causal call of a normalisation that is not causal-safe.

    Returns:
      The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype.

    Raises:
      ValueError: if the normalisation has no fast path, a per-head parameter is missing, an
        option is refused, or a causal call is not causal-safe (``check_causal``).
    """
    if self.fast is None:
      raise ValueError(f"normalization {self.name!r} has no fast path; use "
                       f"implementation='quadratic'")
    self.check_causal(causal=causal, allow_future_leak=allow_future_leak)
    return self.fast(q, k, v, query_mask=query_mask, key_mask=key_mask, causal=causal,
                     block_size=block_size, **_per_head(self, params),
                     **self.function_options(options))

  def fused_attention(self, q: Array, k: Array, v: Array, params: Mapping[str, Array],
                      options: Optional[Mapping[str, Any]] = None, *, mask=None,
                      query_mask=None, key_mask=None, causal: bool = False,
                      block_size: int = fast_lib.DEFAULT_BLOCK,
                      allow_future_leak: bool = False) -> Array:
    """``fused`` with the ``[heads]`` params as they are (the layout puts heads second to last).

    Args:
      q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
      k: keys, shape ``[..., n_k, h, d]``.
      v: values, shape ``[..., n_k, h, e]``.
      params: ``{param name: array [h]}``, holding every name in ``param_names``.
      options: option values by name; None or missing ones: the defaults.
      mask: dense boolean mask broadcastable to ``[..., h, n_q, n_k]`` (only where the
        normalisation does not normalise over the queries); or None.
      query_mask: boolean ``[..., n_q]``, True = valid query; or None.
      key_mask: boolean ``[..., n_k]``, True = valid key; or None.
      causal: query i sees only the keys j <= i + n_k - n_q.
      block_size: queries per block of the key-offset passes (DNAS, HNAS, Sinkhorn).
      allow_future_leak: a causal call (the flag, or a concrete causal ``mask``) of a
        normalisation that is not causal-safe.

    Returns:
      The outputs, shape ``[..., n_q, h, e]`` in ``q``'s dtype.

    Raises:
      ValueError: if the normalisation has no fused path, a per-head parameter is missing, an
        option is refused, or a causal call is not causal-safe (``check_causal``).
    """
    if self.fused is None:
      raise ValueError(f"normalization {self.name!r} has no fused path; fusable: {fusable()}")
    self.check_causal(causal=causal, mask=mask, allow_future_leak=allow_future_leak)
    return self.fused(q, k, v, mask=mask, query_mask=query_mask, key_mask=key_mask,
                      causal=causal, block_size=block_size, **_per_head(self, params, ()),
                      **self.function_options(options))


def _per_head(norm: Normalization, params: Mapping[str, Array], trailing=(1, 1)) -> dict:
  """The constrained per-head params, each reshaped to its shape + ``trailing``."""
  missing = [name for name in norm.param_names if name not in params]
  if missing:
    raise ValueError(f"normalization {norm.name!r} needs the per-head params {missing}")
  return {p.name: p.constrain(params[p.name]).reshape(jnp.shape(params[p.name]) + trailing)
          for p in norm.params}


def _field_problem(normalization: Normalization) -> Optional[tuple[str, str]]:
  """``(field, what it must be)`` for the first field of ``normalization`` that could not
  work (a weight function that is not callable, a flag that is not a bool, ...), or None."""
  n = normalization
  rules = (
      ("weights", callable(n.weights), "a function (logits, mask, **params, **options) -> "
                                       "weights"),
      ("fast", n.fast is None or callable(n.fast), "None or a function (q, k, v, ...) -> "
                                                   "outputs"),
      ("fast_pays_off", callable(n.fast_pays_off), "a function (q_len, k_len, head_dim, "
                                                   "causal, num_logits) -> bool"),
      ("params", isinstance(n.params, (tuple, list))
       and all(isinstance(p, HeadParam) for p in n.params), "a tuple of HeadParam"),
      ("options", isinstance(n.options, (tuple, list)), "a tuple of Option"),
      ("fused", n.fused is None or callable(n.fused), "None or a function (q, k, v, ...) -> "
                                                     "outputs"),
      ("fused_auto_kernels", isinstance(n.fused_auto_kernels, (tuple, list))
       and all(k in fused_lib.KERNELS for k in n.fused_auto_kernels)
       and (n.fused is not None or not n.fused_auto_kernels),
       f"a tuple of the kernels {fused_lib.KERNELS} (empty without a fused path)"),
      ("fused_own_kernel", n.fused is not None or not n.fused_own_kernel,
       "False without a fused path"),
      ("paper", n.paper is None or (isinstance(n.paper, tuple) and len(n.paper) == 2
                                    and all(isinstance(part, str) for part in n.paper)),
       "None or a (citation, address) pair of strings"),
  )
  for field, ok, must in rules:
    if not ok:
      return field, must
  for field in ("scale_logits", "head_norm", "normalizes_over_queries", "causal_safe",
                "fused_own_kernel"):
    if not isinstance(getattr(n, field), bool):
      return field, "True or False"
  if n.causal_safe and n.normalizes_over_queries:
    return "causal_safe", ("False for a normalisation that normalises over the queries (a "
                           "key's column then holds the later queries)")
  return None


def _check(normalization: Normalization) -> None:
  """Refuse a normalisation whose fields could not work (``_field_problem``), options that
  are not ``Option``s, repeat a name, clash with the functions' own arguments or the per-head
  parameters, or whose default breaks their own rule."""
  name = normalization.name
  problem = _field_problem(normalization)
  if problem:
    field, must = problem
    raise ValueError(f"normalization {name!r}: {field} must be {must}, got "
                     f"{getattr(normalization, field)!r}")
  if not all(isinstance(o, Option) for o in normalization.options):
    raise ValueError(f"normalization {name!r}: options must be Option objects (name, default, "
                     f"rule), got {normalization.options!r}")
  names = normalization.option_names
  clashes = sorted((set(names) & (RESERVED | set(normalization.param_names)))
                   | {n for n in names if names.count(n) > 1})
  if clashes:
    raise ValueError(f"normalization {name!r}: option names {clashes} repeat or clash with the "
                     f"functions' arguments or per-head parameters")
  params = normalization.param_names
  clashes = sorted((set(params) & RESERVED) | {p for p in params if params.count(p) > 1})
  if clashes:
    raise ValueError(f"normalization {name!r}: per-head parameter names {clashes} repeat or "
                     f"clash with the functions' arguments")
  normalization.resolve_options()  # the defaults pass their own rules


# register(normalization, *, replace=False) also raises ValueError for options that are not
# well formed (``_check``); get(name) names the registered normalisations when ``name`` is none
# of them.
REGISTRY: Registry[Normalization] = Registry("normalization", Normalization, _check)
register = REGISTRY.register
unregister = REGISTRY.unregister
get = REGISTRY.get
names = REGISTRY.names
NORMALIZATIONS = REGISTRY.view  #: the live, tuple-like view of the names


def causal_safe_names() -> tuple:
  """The registered normalisations that are causal-safe (``Normalization.causal_safe``).

  Returns:
    Their names, in registration order.
  """
  return tuple(name for name in names() if get(name).causal_safe)


def fusable() -> tuple:
  """The registered normalisations that have a fused path (``implementation="fused"``).

  Returns:
    Their names, in registration order.
  """
  return tuple(name for name in names() if get(name).fused is not None)


def _frozen(value):
  """A hashable copy of an option value (a config's lists become tuples)."""
  if isinstance(value, (list, tuple)):
    return tuple(_frozen(v) for v in value)
  return value


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
  """A normalisation by name and the options it is given: what a config's ``attention``
  section holds, passed unchanged to the modules, which resolve it against the registry.

  ``AttentionSpec("sinkhorn", {"sinkhorn_iters": 5})``; a plain name wherever a spec is taken
  means the normalisation at its defaults. The options are stored sorted as ``(name, value)``
  pairs, so that equal specs compare and hash equal (flax module fields, jit caches).

  A spec is checked when it is made: the name must be registered, and each option must be one
  the normalisation has, of its default's kind (a number, a bool, a string) and accepted by its
  rule, so that a bad value is named where it is written, not at ``init``.

  Attributes:
    name: a registered normalisation (``names()``).
    options: option values by name; the ones left out take their defaults.

  Raises:
    ValueError: naming the normalisation, the option and the value, for an unknown name, an
      option the normalisation does not have, or a value of another kind or refused by the
      option's rule.
  """
  name: str
  options: Union[Mapping[str, Any], tuple] = ()

  def __post_init__(self):
    if not isinstance(self.name, str):
      raise ValueError(f"an attention spec's name must be a string, got {self.name!r}")
    items = self.options.items() if isinstance(self.options, Mapping) else self.options
    try:
      pairs = tuple(sorted((str(key), _frozen(value)) for key, value in items))
    except (TypeError, ValueError):
      raise ValueError(f"attention options must be a mapping of names to values, got "
                       f"{self.options!r}") from None
    object.__setattr__(self, "options", pairs)
    self.resolved()

  @classmethod
  def of(cls, value: Union[str, "AttentionSpec", Mapping[str, Any]]) -> "AttentionSpec":
    """A spec from what a user or a config gives.

    Args:
      value: a name (the defaults), a spec, or a mapping with ``name`` and optional
        ``options`` (a config's ``attention`` section).

    Returns:
      The ``AttentionSpec``.

    Raises:
      ValueError: for any other value.
    """
    if isinstance(value, cls):
      return value
    if isinstance(value, str):
      return cls(value)
    if isinstance(value, Mapping) or hasattr(value, "to_dict"):
      tree = dict(value.to_dict() if hasattr(value, "to_dict") else value)
      if "name" not in tree or set(tree) - {"name", "options"}:
        raise ValueError(f"an attention section holds name and options, got {sorted(tree)}")
      return cls(tree["name"], tree.get("options") or {})
    raise ValueError(f"an attention spec is a name, an AttentionSpec or a mapping with name and "
                     f"options, got {value!r}")

  @property
  def normalization(self) -> Normalization:
    """The registered normalisation it names (``get``'s error if none)."""
    return get(self.name)

  def resolved(self) -> dict:
    """Every option's value, checked (``Normalization.resolve_options``).

    Returns:
      ``{option name: value}``.

    Raises:
      ValueError: for an unknown name, an option the normalisation does not have, or a value
        its rule refuses.
    """
    return self.normalization.resolve_options(dict(self.options))

  def to_config(self) -> dict:
    """The spec as a config's ``attention`` section stores it."""
    return {"name": self.name, "options": dict(self.options)}

  def __str__(self) -> str:
    if not self.options:
      return self.name
    return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.options)})"


# The built-ins. The quadratic and fast functions stay public in weights.py and fast.py.

def _linear_pays_off(q_len, k_len, head_dim, causal, num_logits) -> bool:
  """Linear NAP/NON win once the sequence is longer than twice the head width (eight times when
  causal: prefix moments cost memory); BENCHMARKS.md. That is, the quadratic path's q * k
  logits outnumber the linear one's (q + k) * head_dim moments (four times when causal), which
  also covers fewer queries than keys: a few queries (a first-token head's last block, a
  decoding step) take the quadratic path."""
  return q_len * k_len >= (4 if causal else 1) * (q_len + k_len) * head_dim


def _blockwise_pays_off(q_len, k_len, head_dim, causal, num_logits) -> bool:
  """Blockwise DNAS/HNAS/Sinkhorn recompute logits and are slower than the quadratic path on a
  CPU, so only once the N x N logits of the call (``num_logits`` in all) would pass 1 GiB;
  BENCHMARKS.md."""
  return max(num_logits, q_len * k_len) >= QUADRATIC_LOGITS_LIMIT


def _row_local_pays_off(q_len, k_len, head_dim, causal, num_logits) -> bool:
  """Blockwise sigmoid/sink/softpick/Scalable-Softmax do the quadratic path's work a block of
  queries at a time, and on a CPU are faster once queries and keys both number 1024 (4 blocks):
  1.1-3.3x at N = 1024 .. 4096, forward and forward + backward; or where the logits would pass
  1 GiB; BENCHMARKS.md."""
  return min(q_len, k_len) >= 1024 or _blockwise_pays_off(q_len, k_len, head_dim, causal,
                                                           num_logits)


CUDNN = ("cudnn",)  # "auto" takes the fused path on cuDNN's kernel only (fused.py)


def _paper(citation: str, arxiv_id: str) -> tuple:
  """``Normalization.paper`` of a paper on arXiv."""
  return citation, f"https://arxiv.org/abs/{arxiv_id}"


RICHTER = _paper("Richter & Wattenhofer 2020", "2005.09561")  # NAP, NON
DING = _paper("Ding et al. 2020", "2009.14308")  # DNAS, HNAS, Sinkhorn


def _unblocked(fn):
  """A linear fast path takes no ``block_size``."""
  return lambda q, k, v, *, block_size, **kwargs: fn(q, k, v, **kwargs)


def _leak_checked(fn):
  """A fast or fused function of DNAS, HNAS or Sinkhorn as the registry calls it:
  ``Normalization.fast_attention``/``fused_attention`` have refused a causal call already
  (``causal_safe`` False), so what reaches it is allowed."""
  return lambda *args, **kwargs: fn(*args, allow_future_leak=True, **kwargs)


SOFTMAX = register(Normalization(  # "auto" keeps it quadratic (as flax computes it) but on cuDNN
    "softmax", weights_lib.softmax_weights,
    fast=fast_lib.softmax_attention, fused=fused_lib.softmax_attention,
    fused_auto_kernels=CUDNN, causal_safe=True,
    paper=_paper("Vaswani et al. 2017", "1706.03762")))
DNAS = register(Normalization(
    "dnas", weights_lib.dnas_weights,
    fast=_leak_checked(fast_lib.dnas_attention), fast_pays_off=_blockwise_pays_off,
    normalizes_over_queries=True, fused=_leak_checked(fused_lib.dnas_attention),
    fused_auto_kernels=CUDNN, paper=DING))
HNAS = register(Normalization(
    "hnas", lambda logits, mask, hybrid_weight: weights_lib.hnas_weights(
        logits, hybrid_weight, mask),
    fast=_leak_checked(lambda q, k, v, hybrid_weight, **kw: fast_lib.hnas_attention(
        q, k, v, hybrid_weight, **kw)),
    params=(HeadParam("hybrid_weight",
                      lambda options: nn.initializers.constant(options["hybrid_init"]),
                      constrain=straight_through_clip, per_layer=True),),
    options=(Option("hybrid_init", 0.5, number(0, 1), init_only=True),),  # u at the start
    fast_pays_off=_blockwise_pays_off, normalizes_over_queries=True,
    fused=_leak_checked(lambda q, k, v, hybrid_weight, **kw: fused_lib.hnas_attention(
        q, k, v, hybrid_weight, **kw)),
    fused_auto_kernels=CUDNN, paper=DING))
SINKHORN = register(Normalization(
    "sinkhorn", lambda logits, mask, sinkhorn_iters: weights_lib.sinkhorn_weights(
        logits, sinkhorn_iters, mask),
    fast=_leak_checked(lambda q, k, v, sinkhorn_iters, **kw: fast_lib.sinkhorn_attention(
        q, k, v, sinkhorn_iters, **kw)),
    options=(Option("sinkhorn_iters", 3, integer(1)),), fast_pays_off=_blockwise_pays_off,
    normalizes_over_queries=True,
    # exact, but its 2 k - 1 blockwise offset passes outweigh the fused one: never "auto"
    fused=_leak_checked(lambda q, k, v, sinkhorn_iters, **kw: fused_lib.sinkhorn_attention(
        q, k, v, sinkhorn_iters, **kw)), paper=DING))
NAP = register(Normalization(
    "nap", lambda logits, mask, nap_gain, nap_bias: weights_lib.nap_weights(
        logits, nap_gain, nap_bias, mask),
    fast=_unblocked(lambda q, k, v, nap_gain, nap_bias, **kw: fast_lib.nap_attention(
        q, k, v, nap_gain, nap_bias, **kw)),
    params=(HeadParam("nap_gain", lambda options: nn.initializers.ones),
            HeadParam("nap_bias", lambda options: nn.initializers.zeros)),
    scale_logits=False,  # NAP's normalisation makes the scale moot (as in the paper's code)
    fast_pays_off=_linear_pays_off, causal_safe=True, paper=RICHTER,
    # the logits and weights kept in a Pallas kernel; "auto" only where measured faster
    fused=lambda q, k, v, nap_gain, nap_bias, block_size, **kw: nap_kernels.attention(
        q, k, v, nap_gain, nap_bias, kind="nap", eps=NAP_EPSILON, **kw), fused_own_kernel=True))
NON = register(Normalization(
    "non", weights_lib.non_weights,
    fast=_unblocked(fast_lib.non_attention),
    head_norm=False,  # its 1/sqrt(N) inside non_weights replaces the MTE head LayerNorm
    fast_pays_off=_linear_pays_off, causal_safe=True, paper=RICHTER,
    fused=lambda q, k, v, block_size, **kw: nap_kernels.attention(
        q, k, v, kind="non", eps=NAP_EPSILON, **kw), fused_own_kernel=True))

# Today's wave. Learned per-head parameters start where each paper puts its constant: sigmoid's
# bias offset at 0 (so the bias is -log(n)), the sink logit at 0 (softmax_1), Scalable-Softmax's
# s at 1. The row-local ones have blockwise fast paths (fast.py); stick-breaking's is slower than
# its quadratic path on a CPU, so "auto" takes it only for memory (as DNAS's); sparsemax and
# 1.5-entmax stay quadratic. Sink and Scalable-Softmax are softmax attention with one more key or
# rescaled queries, so they also have fused paths (fused.py).
SIGMOID = register(Normalization(
    "sigmoid", lambda logits, mask, sigmoid_bias: weights_lib.sigmoid_weights(
        logits + sigmoid_bias, None, mask),  # sigmoid(l - log(n) + b), b learned per head
    fast=lambda q, k, v, sigmoid_bias, **kw: fast_lib.sigmoid_attention(q, k, v, sigmoid_bias,
                                                                       **kw),
    params=(HeadParam("sigmoid_bias", lambda options: nn.initializers.zeros),),
    fast_pays_off=_row_local_pays_off, causal_safe=True,
    paper=_paper("Ramapuram et al. 2024", "2409.04431")))
SINK = register(Normalization(
    "sink", lambda logits, mask, sink_logit: weights_lib.sink_weights(logits, sink_logit, mask),
    fast=lambda q, k, v, sink_logit, **kw: fast_lib.sink_attention(q, k, v, sink_logit, **kw),
    params=(HeadParam("sink_logit", lambda options: nn.initializers.zeros),),
    fast_pays_off=_row_local_pays_off,
    fused=lambda q, k, v, sink_logit, **kw: fused_lib.sink_attention(q, k, v, sink_logit, **kw),
    fused_auto_kernels=CUDNN, causal_safe=True, paper=_paper("Xiao et al. 2023", "2309.17453")))
SOFTPICK = register(Normalization(
    "softpick", lambda logits, mask, softpick_eps: weights_lib.softpick_weights(
        logits, mask, softpick_eps),
    fast=lambda q, k, v, softpick_eps, **kw: fast_lib.softpick_attention(q, k, v, softpick_eps,
                                                                        **kw),
    options=(Option("softpick_eps", 1e-6, number(0)),),
    fast_pays_off=_row_local_pays_off, causal_safe=True,
    paper=_paper("Zuhri et al. 2025", "2504.20966")))
SSMAX = register(Normalization(
    "ssmax", lambda logits, mask, ssmax_scale: weights_lib.ssmax_weights(
        logits, ssmax_scale, mask),
    fast=lambda q, k, v, ssmax_scale, **kw: fast_lib.ssmax_attention(q, k, v, ssmax_scale, **kw),
    params=(HeadParam("ssmax_scale", lambda options: nn.initializers.ones),),
    fast_pays_off=_row_local_pays_off,
    fused=lambda q, k, v, ssmax_scale, **kw: fused_lib.ssmax_attention(q, k, v, ssmax_scale,
                                                                       **kw),
    fused_auto_kernels=CUDNN, causal_safe=True, paper=_paper("Nakanishi 2025", "2501.19399")))
SPARSEMAX = register(Normalization(
    "sparsemax", weights_lib.sparsemax_weights,
    needs_float32="its gradient flows through the keys in the support alone, and bf16's rounding "
                  "of the logits moves keys in and out of it: 9% off the float32 gradient "
                  "(tests/test_precision.py)", causal_safe=True,
    paper=_paper("Martins & Astudillo 2016", "1602.02068")))
ENTMAX15 = register(Normalization("entmax15", weights_lib.entmax15_weights, causal_safe=True,
                                  paper=_paper("Peters et al. 2019", "1905.05702")))
STICKBREAKING = register(Normalization(
    "stickbreaking", weights_lib.stickbreaking_weights,
    fast=fast_lib.stickbreaking_attention, fast_pays_off=_blockwise_pays_off, causal_safe=True,
    paper=_paper("Tan et al. 2024", "2410.17980")))

#: The names above, fixed -- what the library ships, whatever a user registers later.
BUILTIN_NORMALIZATIONS = names()
