"""PyTorch-style functional API (`torch.nn.functional` signatures and semantics).

The ops declared once (`defop`/`composite`) live in their family files and are
re-exported here: the layers (linear, the norms, embedding, dropout,
scaled_dot_product_attention: nn/_linear.py, nn/_norms.py, ...), the spatial ops
(convolutions, pools, resampling, padding: nn/_conv.py, nn/_pool.py, ...), the
activations (ops/activations.py), the losses (nn/_losses.py). A face: no op is defined
here. Kernels allocate the arrays they return and at most one temporary they state
(block-sized where they can), reuse their own temporaries with `out=`, and never write into
`g`, a saved array or the caller's arrays; the comment of each kernel counts its passes
over memory. Images are NCHW. The full-size arrays a forward or a kernel makes (outputs,
temporaries, masks) come from the caching allocator (`memory`): reused memory, not fresh
pages to fault in every step.
"""
from __future__ import annotations

import inspect as _inspect

from ..ops.reduce import log_softmax, softmax  # torch.nn.functional's too
from ..ops import activations as _activations  # noqa: F401  (declares F's activations)
from ..primitive import exports as _exports
from ..ops.writes.inplace import inplace_form as _inplace_form
# The spatial families, each op declared once in its file (`primitive.defop`/`composite`):
# convolutions, pooling, resampling, padding.
from ._conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: F401
                    conv_transpose3d, fold, unfold)
from ._lppool import lp_pool1d, lp_pool2d, lp_pool3d  # noqa: F401
from ._pad import pad  # noqa: F401
from ._pool import (adaptive_max_pool1d, adaptive_max_pool2d, avg_pool1d, avg_pool2d,  # noqa: F401
                    max_pool1d, max_pool2d)
from ._pool3d import adaptive_avg_pool3d, adaptive_max_pool3d, avg_pool3d, max_pool3d  # noqa: F401
from ._resample import (adaptive_avg_pool1d, adaptive_avg_pool2d, interpolate, pixel_shuffle,  # noqa: F401
                        pixel_unshuffle, upsample, upsample_bilinear, upsample_nearest)
from ._unpool import max_unpool1d, max_unpool2d  # noqa: F401
# The layer families, one file each: dropout, attention, embedding, linear, norms.
from ._dropout import (alpha_dropout, dropout, dropout1d, dropout2d,  # noqa: F401
                       dropout3d, draws_from, feature_alpha_dropout, keep_mask)
from ._attention import scaled_dot_product_attention  # noqa: F401
from ._embedding import embedding  # noqa: F401
from ._linear import bilinear, linear  # noqa: F401
# The losses, one file (nn/_losses.py): nll_loss and cross_entropy (one fused node each over
# (N, C) rows), the pointwise losses (one fused node each), the rest composed of ops.
from . import _losses  # noqa: F401  (declares F's losses: exported below)
# More of torch.nn.functional, built on the ops (nn/_extras.py)
from ._extras import normalize, one_hot, relu6, softmin  # noqa: F401
from ._norms import (batch_norm, group_norm, instance_norm, layer_norm,  # noqa: F401
                     local_response_norm, rms_norm)

__all__ = [
    "linear", "bilinear", "layer_norm", "rms_norm", "embedding",
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout", "scaled_dot_product_attention", "softmax", "log_softmax",
    "batch_norm", "instance_norm", "group_norm", "local_response_norm",
    "one_hot", "normalize", "relu6", "softmin",
]
# The declared ops of PyTorch's `torch.nn.functional` (`defop(module=...)`): the activations,
# the spatial families above, the losses, ...
globals().update(_exports("torch.nn.functional"))
__all__.extend(sorted(set(_exports("torch.nn.functional")) - set(__all__)))



# PyTorch's `inplace=True`: the ops above take the keyword; these forms write the result into
# the input and return it (ops/writes/inplace.py `inplace_form`), recorded when grad is
# involved, as PyTorch's.
for _name in [n for n in __all__ if "inplace" in _inspect.signature(globals()[n]).parameters]:
    globals()[_name] = _inplace_form(globals()[_name])
del _name
