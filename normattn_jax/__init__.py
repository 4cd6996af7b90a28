"""normattn_jax: attention normalisations in JAX/Flax (softmax, DNAS, HNAS, Sinkhorn, NAP, NON)."""
from normattn_jax import _moved
from normattn_jax.attention import AttentionModuleSpec, AttentionSpec, MultiHeadAttention
from normattn_jax.blocks import ARCHITECTURES, TransformerBlock
from normattn_jax.models.sequence import SequenceModel

__all__ = ["ARCHITECTURES", "AttentionModuleSpec", "AttentionSpec", "MultiHeadAttention",
           "SequenceModel", "TransformerBlock"]
__version__ = "0.1.0"
_moved.install()  # the previous release's import paths, for one release
