"""MIGRATION: the old home of the arithmetic and the activations, now declared in
ops/pointwise.py and ops/activations.py. The names the families not migrated yet import
from here are re-exported (ops, and the shared helpers' old private names); the module goes
when the last of them imports the new homes."""
from __future__ import annotations

from ._common import BLOCK, as_float, buf, fused, weak
from .activations import gelu, leaky_relu, relu, sigmoid, silu  # noqa: F401  MIGRATION
from .pointwise import (abs, add, clamp, cos, div, exp, log, maximum,  # noqa: F401  MIGRATION
                        minimum, mul, neg, pow, sin, sqrt, sub, tanh, where)

clip = clamp  # MIGRATION: the old name, until the other families import ops/pointwise


# MIGRATION: the shared helpers' old names here (ops/_common.py has them), for the families
# that still import them from this module
_weak, _buf, _fused, _float, _BLOCK = weak, buf, fused, as_float, BLOCK
