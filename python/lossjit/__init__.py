"""lossjit: fused linear → log-softmax → NLL kernels for PyTorch.

    import lossjit
    loss = lossjit.linear_cross_entropy(hidden, lm_head.weight, target)

The [tokens, vocabulary] logits are never materialized; all math runs in
float32 from float16/bfloat16/float32 storage and every reduction has a fixed
order, so results are bitwise reproducible. CPU tensors run kernels compiled
by LLVM's JIT, CUDA tensors PTX kernels through the CUDA driver.
"""

from ._ext import C as _C
from ._ext import HAS_COMPILER as has_compiler
from . import _ops  # noqa: F401  (registers the torch.library ops)
from . import _reduce  # noqa: F401  (the vocabulary-reduction ops)
from . import distributed  # noqa: F401  (lossjit.distributed: losses over a process group)
from ._kernels import cache_info, clear_cache, describe_build
from .functional import (linear_cross_entropy, linear_jsd, linear_kl_div, linear_log_prob,
                         linear_topk_distill)
from .jit import JitError, JittedLoss, jit
from .nn import LinearCrossEntropyLoss

__version__ = _C.__version__

__all__ = [
    "linear_cross_entropy",
    "linear_log_prob",
    "linear_topk_distill",
    "linear_kl_div",
    "linear_jsd",
    "LinearCrossEntropyLoss",
    "jit",
    "distributed",
    "JitError",
    "JittedLoss",
    "has_compiler",
    "describe_build",
    "cache_info",
    "clear_cache",
    "__version__",
]
