"""Attention normalisations: pure weight functions, their registry and the attention module."""
from normattn_jax.attention.weights import (dnas_weights, entmax15_weights, hnas_weights,
                                            nap_weights, non_weights, sigmoid_weights,
                                            sink_weights, sinkhorn_weights, softmax_weights,
                                            softpick_weights, sparsemax_weights, ssmax_weights,
                                            stickbreaking_weights)
from normattn_jax.attention.registry import (BUILTIN_NORMALIZATIONS, NORMALIZATIONS,
                                             AttentionSpec, HeadParam, Normalization, Option, get,
                                             names, register, unregister)
from normattn_jax.attention.module import MultiHeadAttention
from normattn_jax.attention.module_spec import AttentionModuleSpec

__all__ = [
    "BUILTIN_NORMALIZATIONS", "NORMALIZATIONS", "AttentionModuleSpec", "AttentionSpec",
    "HeadParam", "MultiHeadAttention",
    "Normalization", "Option", "dnas_weights", "entmax15_weights", "get",
    "hnas_weights", "nap_weights", "names", "non_weights", "register", "sigmoid_weights",
    "sink_weights", "sinkhorn_weights", "softmax_weights", "softpick_weights",
    "sparsemax_weights", "ssmax_weights", "stickbreaking_weights", "unregister",
]
