"""The layers of `parallel_autograd.nn`, one file per family (PyTorch's layout)."""
from .activation import GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .activation import (CELU, ELU, GLU, SELU, Hardsigmoid, Hardswish, Hardtanh, LogSigmoid,
                         Mish, PReLU, ReLU6, Softmin, Softplus, Softsign)
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                   ConvTranspose3d, Fold, Unfold)
from .dropout import Dropout
from .flatten import Flatten
from .linear import Bilinear, Identity, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .loss import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, HuberLoss, KLDivLoss,
                   L1Loss, MarginRankingLoss, SmoothL1Loss, TripletMarginLoss)
from .norm import LayerNorm, RMSNorm
from .norm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d,
                   InstanceNorm2d, InstanceNorm3d, LocalResponseNorm)
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d,
                      AvgPool2d, AvgPool3d, LPPool1d, LPPool2d, LPPool3d, MaxPool1d,
                      MaxPool2d, MaxPool3d, MaxUnpool1d,
                      MaxUnpool2d, PixelShuffle, PixelUnshuffle, Upsample)
from .attention import MultiheadAttention
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding, EmbeddingBag
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "BCELoss", "BCEWithLogitsLoss", "Bilinear",
    "CELU",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "CosineEmbeddingLoss", "CrossEntropyLoss", "Dropout", "ELU", "Embedding", "EmbeddingBag",
    "Flatten",
    "Fold", "GELU", "GLU", "GroupNorm", "GRU", "GRUCell", "Hardsigmoid", "Hardswish",
    "Hardtanh", "HuberLoss", "Identity", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "KLDivLoss", "L1Loss", "LayerNorm", "LeakyReLU", "Linear", "LocalResponseNorm",
    "LogSigmoid", "LogSoftmax", "LPPool1d", "LPPool2d", "LPPool3d", "LSTM", "LSTMCell",
    "MarginRankingLoss", "MaxPool1d",
    "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "Mish", "ModuleDict", "ModuleList",
    "MSELoss", "MultiheadAttention", "NLLLoss", "ParameterDict", "ParameterList",
    "PixelShuffle", "PixelUnshuffle", "PReLU", "ReLU", "ReLU6", "RMSNorm", "RNN", "RNNBase",
    "RNNCell",
    "RNNCellBase", "SELU", "Sequential", "Sigmoid", "SiLU", "SmoothL1Loss", "Softmax",
    "Softmin", "Softplus", "Softsign", "Tanh", "Transformer", "TransformerDecoder",
    "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer",
    "TripletMarginLoss", "Unfold", "Upsample",
]
