"""The layers of `parallel_autograd.nn`, one file per family (PyTorch's layout)."""
from .activation import GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv2d
from .dropout import Dropout
from .flatten import Flatten
from .linear import Identity, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .norm import LayerNorm, RMSNorm
from .pooling import AvgPool2d, MaxPool2d
from .sparse import Embedding

__all__ = [
    "AvgPool2d", "Conv2d", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU",
    "Identity", "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "MaxPool2d",
    "ModuleDict", "ModuleList", "NLLLoss", "ParameterDict", "ParameterList", "RMSNorm", "ReLU", "Sequential", "SiLU",
    "Sigmoid", "Softmax", "Tanh",
]
