"""The writes family: in-place methods (`add_`, `+=`, `copy_`, `scatter_`, `exp_`,
`unsqueeze_`, `uniform_`, ...: `inplace.py`) and `t[index] = value` (`setitem.py`).

Why the in-place methods are not `defop` declarations: a declared op computes a new array
from its inputs and records a Node for it; an in-place method writes into the tensor's own
array, bumps its version counter, and is refused, not recorded, wherever a gradient is
involved (a leaf that requires grad, a tensor with history, an operand that requires
grad, with grad mode on): there is no derivative to declare and nothing to record. They
are table entries (`METHODS`, name -> method) that `methods.py` puts on Tensor. The one
recorded write, `t[index] = value` with grad involved, goes through the declared op
`index_put` (`setitem.index_put_planned`: formula and kernel for both of its inputs),
which t then takes as its history.

Thread safety: like any write to an array, not synchronised with readers.
"""
from .inplace import METHODS, bernoulli
from .setitem import index_put

# (`setitem` names the module: the function is `setitem.setitem`, METHODS["__setitem__"])
__all__ = ["METHODS", "bernoulli", "index_put"]
