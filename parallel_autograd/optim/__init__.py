"""`pa.optim`: optimizers and learning-rate schedulers with `torch.optim`'s names,
semantics and arithmetic (float64 runs agree with PyTorch's to rounding).

`SGD`, `Adam`, `AdamW`, `NAdam`, `RAdam`, `RMSprop`, `Adagrad`, `Adadelta`, `LBFGS`
(subclasses of `Optimizer`) update the
parameters' arrays in place, blockwise, allocating nothing per step beyond their state,
and bump each updated parameter's version counter. `lr_scheduler` holds torch's schedulers
(`StepLR`, `MultiStepLR`, `ExponentialLR`, `CosineAnnealingLR`, `OneCycleLR`,
`ReduceLROnPlateau`, `SequentialLR`, ... : the list in its docstring).

Thread safety: optimizers and schedulers are not locked: use each from one thread at a
time, and do not step while a backward call may write the same `.grad` arrays.
"""
from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .lbfgs import LBFGS
from .nadam import NAdam, RAdam
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Adadelta", "Adagrad", "Adam", "AdamW", "LBFGS", "NAdam", "Optimizer", "RAdam",
           "RMSprop", "SGD", "lr_scheduler"]
