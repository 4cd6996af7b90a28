"""``AttentionModuleSpec``: the attention module's own options as one value.

One level up from ``AttentionSpec`` (a normalisation's name and options), these are the options
of ``MultiHeadAttention`` itself: how the weights are computed (``implementation``) and the
module's additions around them (``output_gate``, ``qk_norm``, ``differential``). The models, the
sweep's grid and pre-training carry this one value from a config to the module, so a new module
option is a field here and one in ``MultiHeadAttention``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

IMPLEMENTATIONS = ("auto", "quadratic", "fast", "fused")
OUTPUT_GATES = (None, "headwise", "elementwise")
QK_NORMS = (None, "rms", "layer")
# A config section's field of each option where its name differs (a config's
# ``model.attention_implementation``: ``model.implementation`` would not say of what).
CONFIG_FIELDS = {"implementation": "attention_implementation"}
# The options that add to attention (not ``implementation``, which only picks how it is computed).
ADDITIONS = ("output_gate", "qk_norm", "differential")


def first_problem(values: dict) -> Optional[tuple[str, object, str]]:
  """The first option out of range, as ``(name, value, why)``, or None when all are fine.

  Args:
    values: option name -> value (``AttentionModuleSpec``'s fields).
  """
  for name, choices in (("implementation", IMPLEMENTATIONS), ("output_gate", OUTPUT_GATES),
                        ("qk_norm", QK_NORMS)):
    if values[name] not in choices:
      return name, values[name], f"must be one of {choices}"
  if not isinstance(values["differential"], (bool, np.bool_)):
    return "differential", values["differential"], "must be True or False"
  return None


@dataclasses.dataclass(frozen=True)
class AttentionModuleSpec:
  """The options of ``MultiHeadAttention`` above its normalisation, checked when made.

  Attributes:
    implementation: "auto" | "quadratic" | "fast" | "fused" (``MultiHeadAttention``'s).
    output_gate: None | "headwise" | "elementwise": gated attention (Qiu et al. 2025).
    qk_norm: None | "rms" | "layer": a norm of each head's queries and keys.
    differential: differential attention (Ye et al. 2024); needs an even head width.
  """
  implementation: str = "auto"
  output_gate: Optional[str] = None
  qk_norm: Optional[str] = None
  differential: bool = False

  def __post_init__(self):
    problem = first_problem(dataclasses.asdict(self))
    if problem:
      name, value, why = problem
      raise ValueError(f"{name}={value!r}: {why}")

  @classmethod
  def from_config(cls, section, path: str = "model") -> AttentionModuleSpec:
    """The spec of a config section that holds the options under their config names
    (``CONFIG_FIELDS``), a bad value refused as ``config.<path>.<field>=<value>: <why>``.

    Args:
      section: e.g. a sweep's or pre-training's ``model`` section.
      path: the section's dotted path, for errors.

    Returns:
      The spec.

    Raises:
      ValueError: naming the config field and its value.
    """
    values = {name: section[config_field(name)] for name in field_names()}
    problem = first_problem(values)
    if problem:
      name, value, why = problem
      raise ValueError(f"config.{path}.{config_field(name)}={value!r}: {why}")
    return cls(**values)

  def added(self) -> dict:
    """The options that add to attention, name -> value, those switched on only (an arch
    without attention can take none of them)."""
    return {name: getattr(self, name) for name in ADDITIONS
            if getattr(self, name) not in (None, False)}

  def check_head_dim(self, head_dim: int) -> None:
    """Refuse a head width that ``differential`` cannot split in two maps.

    Args:
      head_dim: each head's width.

    Raises:
      ValueError: naming ``differential`` and the width.
    """
    if self.differential and head_dim % 2:
      raise ValueError(f"differential=True splits each head's query and key features in two "
                       f"maps, so the head width must be even, got {head_dim}")

  def module_kwargs(self) -> dict:
    """``MultiHeadAttention``'s keyword arguments (the Linen and the NNX one alike)."""
    return {name: getattr(self, name) for name in field_names()}


def check_module_spec(value, head_dim: Optional[int] = None) -> None:
  """Refuse a model's ``attention_module`` field that is no ``AttentionModuleSpec``, or whose
  ``differential`` its head width cannot take.

  Args:
    value: the field's value.
    head_dim: each head's width where known, or None.

  Raises:
    ValueError: naming ``attention_module`` (or ``differential``) and the value.
  """
  if not isinstance(value, AttentionModuleSpec):
    raise ValueError(f"attention_module must be an AttentionModuleSpec, got {value!r}")
  if head_dim is not None:
    value.check_head_dim(head_dim)


def field_names() -> tuple[str, ...]:
  """Every option's name, as ``MultiHeadAttention`` spells it."""
  return tuple(f.name for f in dataclasses.fields(AttentionModuleSpec))


def config_field(name: str) -> str:
  """An option's field in a config section (``CONFIG_FIELDS``, else its own name)."""
  return CONFIG_FIELDS.get(name, name)
