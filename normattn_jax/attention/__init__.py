"""Attention normalisations: pure weight functions and the multi-head attention module."""
from normattn_jax.attention.weights import (NORMALIZATIONS, dnas_weights, hnas_weights,
                                            nap_weights, non_weights, sinkhorn_weights,
                                            softmax_weights)
from normattn_jax.attention.module import MultiHeadAttention

__all__ = [
    "NORMALIZATIONS", "MultiHeadAttention", "dnas_weights", "hnas_weights", "nap_weights",
    "non_weights", "sinkhorn_weights", "softmax_weights",
]
