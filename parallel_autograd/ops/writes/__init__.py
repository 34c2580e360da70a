"""The writes family: in-place methods (`add_`, `+=`, `copy_`, `scatter_`, `exp_`,
`unsqueeze_`, `uniform_`, ...: `inplace.py`) and `t[index] = value` (`setitem.py`).

Why the in-place methods are not `defop` declarations of their own: a declared op computes
a new array from its inputs and records a Node for it; an in-place method writes into the
tensor's own array and bumps its version counter. Where a gradient is involved (the tensor
has a history, or an operand requires grad) it is recorded through the declared
out-of-place op (`add` for `add_`, `exp` for `exp_`, `index_put` for `fill_`: `record.py`
rebases the tensor's history onto that op's node), so its derivative is declared once,
there. They are table entries (`METHODS`, name -> method) that `methods.py` puts on Tensor.
`t[index] = value` with grad involved goes through the declared op `index_put`
(`setitem.index_put_planned`), which t then takes as its history.

Thread safety: like any write to an array, not synchronised with readers.
"""
from .inplace import METHODS, bernoulli
from .setitem import index_put

# (`setitem` names the module: the function is `setitem.setitem`, METHODS["__setitem__"])
__all__ = ["METHODS", "bernoulli", "index_put"]
