"""The op walk: every op of the package's namespaces with inputs to call it on.

`NAMESPACES` enumerates the names programmatically (pa's public functions, Tensor's
methods, properties and operators, `nn.functional.__all__`, `linalg.__all__`); `CASES`
gives, per op, the input shapes (letters are dimensions: `"ij"` is a matrix, `""` a 0-d
tensor, a digit a fixed size) and a builder of the call's arguments that works for both
libraries (`m` is `Lib("pa")` or `Lib("torch")`), so each case runs on parallel_autograd
and on PyTorch with the same values. `SKIP` lists the few names no case covers, with why.
`uncovered()` is what a test asserts empty: a new op without a case fails the walk.

Used by test_view_versions.py (in-place writes through views must be detected) and
test_zero_size.py (empty dimensions give PyTorch's results).
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import parallel_autograd as pa
import parallel_autograd.nn.functional as F

try:
    import torch
except ImportError:  # the walk still runs on parallel_autograd alone
    torch = None

SIZES = {"i": 3, "j": 4, "k": 5, "b": 2, "c": 3, "n": 3, "o": 3, "l": 3, "s": 4, "d": 2,
         "e": 3, "h": 2, "w": 5, "t": 4}


class KW(dict):
    """Keyword arguments, as the last item an `args` builder returns."""


@dataclass
class Case:
    name: str
    shapes: tuple                  # per tensor input: dimension letters ("ij"), "" is 0-d
    args: Callable                 # (m, *inputs) -> positional args [+ KW(...)]
    where: str = "fm"              # f: pa.<name>, m: Tensor method, a: Tensor attribute,
    #                                F: nn.functional, L: linalg, o: operator (method form)
    dtypes: str = ""               # per input: f float64 (default), s float32, i int64, b bool
    init: Callable | None = None   # (rng, shape) -> array, for inputs with a domain
    grad: bool = True              # float inputs require grad (zero-size walk)
    tname: str | None = None       # torch's name when it differs
    label: str = ""                # tells several cases of one name apart
    sizes: dict = field(default_factory=dict)  # letter sizes overriding SIZES
    inplace: bool = False          # writes its first input (run without grad)
    exact: bool = True             # compare values with PyTorch's (False: random draws,
    #                                values defined up to sign, other result types)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.label}]" if self.label else self.name


class Lib:
    """What an args builder needs from a library: its namespaces and tensor makers."""

    def __init__(self, kind: str):
        self.torch = kind == "torch"
        self.lib = torch if self.torch else pa
        self.F = torch.nn.functional if self.torch else F
        self.linalg = torch.linalg if self.torch else pa.linalg

    def t(self, a, requires_grad: bool = False):
        a = np.asarray(a)
        if self.torch:
            return torch.tensor(a, requires_grad=requires_grad)
        return pa.tensor(a, requires_grad=requires_grad)

    def idx(self, a):
        return self.t(np.asarray(a, dtype=np.int64))

    def mask(self, shape, seed: int = 0):
        return self.t(index_array(shape, 2, seed).astype(bool))

    def dtype(self, name: str):
        return getattr(torch, name) if self.torch else np.dtype(name)


def index_array(shape, high: int, seed: int = 0) -> np.ndarray:
    """Deterministic integers in [0, high) of `shape` (zeros when high is 0)."""
    n = int(np.prod(shape)) if len(shape) else 1
    v = (np.arange(n, dtype=np.int64) * 7 + 3 + seed) % max(high, 1)
    return v.reshape(shape)


def perm_index(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)[::-1].copy()


def shape_of(spec: str, sizes: dict) -> tuple:
    return tuple(int(c) if c.isdigit() else sizes[c] for c in spec)


def make_arrays(case: Case, sizes: dict | None = None, seed: int = 0) -> list:
    """The case's inputs as numpy arrays (sizes: letter -> size)."""
    sz = {**SIZES, **case.sizes, **(sizes or {})}
    rng = np.random.default_rng(seed)
    out = []
    for i, spec in enumerate(case.shapes):
        shape = shape_of(spec, sz)
        kind = case.dtypes[i] if i < len(case.dtypes) else "f"
        if kind == "i":
            out.append(index_array(shape, 5, i).astype(np.int64))
        elif kind == "b":
            out.append(index_array(shape, 2, i).astype(bool))
        elif case.init is not None:
            out.append(np.asarray(case.init(rng, shape), np.float64))
        else:
            out.append(rng.standard_normal(shape))
        if kind == "s":
            out[-1] = out[-1].astype(np.float32)
    return out


def call(case: Case, form: str, m: Lib, inputs: list):
    """Run `case` in `form` on `m`'s tensors `inputs`; AttributeError when the library
    has no such op (torch lacks a few of pa's names)."""
    return prepare(case, form, m, inputs)()


def prepare(case: Case, form: str, m: Lib, inputs: list) -> Callable:
    """The call of `case` in `form` on `inputs`, its arguments built (a builder that
    cannot build them for these inputs, say a 0-d tensor's second dimension, raises
    here and not in the call); AttributeError when the library has no such op."""
    if form == "x":
        return lambda: case.args(m, *inputs)
    args = list(case.args(m, *inputs))
    kw = args.pop() if args and isinstance(args[-1], KW) else {}
    name = (case.tname or case.name) if m.torch else case.name
    if form == "f":
        fn = getattr(m.lib, name)
    elif form == "F":
        fn = getattr(m.F, name)
    elif form == "L":
        fn = getattr(m.linalg, name)
    elif form == "a":
        return lambda: getattr(args[0], name)
    else:  # "m" and "o": a method of the first argument
        fn, args = getattr(args[0], name), args[1:]
    return lambda: fn(*args, **kw)


def tensors_of(out) -> list:
    """The tensors in an op's result (a tensor, a tuple/list/namedtuple of them)."""
    kinds = (pa.Tensor,) if torch is None else (pa.Tensor, torch.Tensor)
    if isinstance(out, kinds):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in tensors_of(o)]
    return []


def attempt(fn):
    """(fn(), None), or (None, the exception it raised), its warnings silenced: the walks
    compare PyTorch's outcome with ours, errors included."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(), None
        except Exception as e:  # noqa: BLE001 - the walk compares exceptions
            return None, e


# ---- input domains -------------------------------------------------------------------------
def _pos(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def _unit(rng, shape):
    return rng.uniform(-0.9, 0.9, shape)


def _prob(rng, shape):
    return rng.uniform(0.1, 0.9, shape)


def _spd(rng, shape):
    a = rng.standard_normal(shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return a
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _distinct(rng, shape):
    n = int(np.prod(shape)) if shape else 1
    return rng.permutation(n).reshape(shape) + rng.uniform(0, 0.1, shape)


# ---- the cases --------------------------------------------------------------------------
def _x(m, x, *rest):
    return (x, *rest)


CASES: list = []


class _Identity(pa.Function):
    """A user op whose forward returns its input's array (or a view of it)."""

    @staticmethod
    def forward(ctx, a):
        return a

    @staticmethod
    def backward(ctx, g):
        return g


def add(names: str, shapes, args=_x, **kw) -> None:
    for name in names.split():
        CASES.append(Case(name, tuple(shapes), args, **kw))


UNARY = ("abs acos acosh asin asinh atan atanh ceil cos cosh erf erfc exp exp2 expm1 floor "
         "frac log log10 log1p log2 neg reciprocal relu round rsqrt sigmoid sign sgn signbit "
         "silu sin sinh sqrt square tan tanh trunc isfinite isinf isnan isneginf isposinf "
         "nan_to_num logical_not clone msort gelu leaky_relu celu selu")
add(UNARY, ["ij"])
add("positive", ["ij"])
add("absolute arccos arccosh arcsin arcsinh arctan arctanh fix negative ravel", ["ij"])
add("bitwise_not", ["ij"], dtypes="i")
BINARY = ("add sub mul div maximum minimum pow atan2 hypot fmod remainder floor_divide "
          "float_power true_divide eq ne lt le gt ge isclose allclose equal logical_and "
          "logical_or logical_xor")
add(BINARY, ["ij", "ij"])
add("arctan2 divide multiply subtract greater greater_equal less less_equal not_equal",
    ["ij", "ij"])
add("copysign logaddexp logaddexp2", ["ij", "ij"])
add("bitwise_left_shift bitwise_right_shift", ["ij", "ij"], lambda m, x, y: (x, y % 3),
    dtypes="ii")
add("__lshift__ __rshift__ __rlshift__ __rrshift__", ["ij", "ij"],
    lambda m, x, y: (x, y % 3), where="o", dtypes="ii")
add("add sub mul div pow maximum", ["ij", "j"], label="broadcast")
add("add mul", ["ij"], lambda m, x: (x, 2.0), label="scalar")
add("bitwise_and bitwise_or bitwise_xor", ["ij", "ij"], dtypes="ii")
add("where", ["ij", "ij", "ij"], lambda m, c, x, y: (c, x, y), dtypes="bff", where="f")
add("where", ["ij", "ij", "ij"], lambda m, x, c, y: (x, c, y), dtypes="fbf", where="m",
    label="method")  # x.where(condition, y)
add("clamp clip", ["ij"], lambda m, x: (x, -0.5, 0.5))
add("clamp_min", ["ij"], lambda m, x: (x, -0.5))
add("clamp_max", ["ij"], lambda m, x: (x, 0.5))
add("addcmul addcdiv", ["ij", "ij", "ij"], lambda m, x, a, b: (x, a, b, KW(value=0.5)))
add("lerp", ["ij", "ij"], lambda m, x, e: (x, e, 0.3))
add("prelu", ["bcw", "c"])
add("div", ["ij", "ij"], lambda m, x, y: (x, y, KW(rounding_mode="floor")), where="m",
    label="floor")

# operators (method form: x.__add__(y) on both libraries)
add("__add__ __sub__ __mul__ __truediv__ __pow__ __radd__ __rsub__ __rmul__ __rtruediv__ "
    "__rpow__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__ __mod__ __rmod__ __floordiv__ "
    "__rfloordiv__", ["ij", "ij"], where="o")
add("__matmul__ __rmatmul__", ["ij", "ji"], where="o")
add("__neg__ __pos__ __abs__", ["ij"], where="o")
add("__and__ __or__ __xor__ __rand__ __ror__ __rxor__", ["ij", "ij"], where="o", dtypes="ii")
add("__invert__", ["ij"], where="o", dtypes="b")
add("__getitem__", ["ij"], lambda m, x: (x, (slice(1, None), 0)), where="o", label="basic")
add("__getitem__", ["ij"], lambda m, x: (x, (Ellipsis, None)), where="o", label="none")
add("__getitem__", ["ij"], lambda m, x: (x, slice(None)), where="o", label="all")
add("__getitem__", ["ij"], lambda m, x: (x, m.idx([0, 0])), where="o", label="advanced")
add("__getitem__", ["ij"], lambda m, x: (x, m.mask(x.shape)), where="o", label="mask")
add("getitem", ["ij"], lambda m, x: (x, (slice(None), slice(1, 3))), where="f")
add("__iadd__ __isub__ __imul__ __itruediv__", ["ij", "ij"], where="o", inplace=True)
add("__setitem__", ["ij"], lambda m, x: (x, 0, 1.0), where="o", inplace=True)
add("__len__ __repr__ __array__", ["ij"], where="o", grad=False)
add("__bool__ __float__", [""], where="o")
add("__int__ __complex__", [""], where="o")
add("__index__", [""], where="o", dtypes="i")

# reductions and scans
add("sum mean prod amax amin logsumexp argmax argmin std norm median count_nonzero", ["ij"],
    lambda m, x: (x, 1), label="dim")
add("max min", ["ij"], lambda m, x: (x, KW(dim=1)), label="dim")  # pa: axis= gives values
add("sum mean prod amax amin max min argmax argmin std norm median count_nonzero", ["ij"],
    label="all")
add("var", ["ij"], lambda m, x: (x, 1, KW(correction=0)), label="dim")
add("var", ["ij"], lambda m, x: (x, KW(correction=0)), label="all")
add("var_mean std_mean", ["ij"], lambda m, x: (x, 1), where="f")
add("sum mean amax", ["ij"], lambda m, x: (x, 0, True), label="keepdim")
add("max", ["ij"], lambda m, x: (x, KW(dim=0, keepdim=True)), label="keepdim")
add("cumsum cumprod logcumsumexp cummax cummin softmax log_softmax", ["ij"],
    lambda m, x: (x, 1))
add("sort argsort", ["ij"], lambda m, x: (x, 1))
add("topk kthvalue", ["ij"], lambda m, x: (x, 1, 1))
add("any all", ["ij"], dtypes="b")
add("any all", ["ij"], lambda m, x: (x, 1), dtypes="b", where="m", label="dim")
add("unique", ["ij"], lambda m, x: (x, True, True, True), init=lambda r, s: np.round(
    r.standard_normal(s)))
add("nonzero", ["ij"], dtypes="i")
add("bincount", ["i"], dtypes="i")
add("bincount", ["i", "i"], lambda m, x, w: (x, w), dtypes="if", label="weights")

# products
add("matmul mm", ["ij", "jk"])
add("matmul", ["bij", "jk"], label="batched")
add("bmm", ["bij", "bjk"])
add("mv", ["ij", "j"])
add("dot", ["i", "i"])
add("outer ger", ["i", "j"])
add("addmm", ["ik", "ij", "jk"])
add("addmv", ["i", "ij", "j"])
add("baddbmm", ["bik", "bij", "bjk"])
add("cross", ["i3", "i3"], lambda m, x, y: (x, y, 1))
add("kron", ["ij", "kl"])
add("matrix_power", ["ii"], lambda m, x: (x, 2))
add("matrix_power", ["ii"], lambda m, x: (x, 1), label="one")
add("diag", ["i"], label="vector")
add("diag", ["ij"], label="matrix")
add("trace", ["ij"])
add("einsum", ["ij", "jk"], lambda m, x, y: ("ij,jk->ik", x, y), where="f")
add("einsum", ["ij"], lambda m, x: ("ij->ij", x), where="f", label="identity")
add("einsum", ["ii"], lambda m, x: ("ii->i", x), where="f", label="diagonal")

# shape and view ops
add("reshape view", ["ij"], lambda m, x: (x, (x.shape[1], x.shape[0])))
add("reshape view", ["ij"], lambda m, x: (x, x.shape), label="same")
add("reshape", ["ij"], lambda m, x: (x, (-1,)), label="flat")
add("flatten", ["ijk"], lambda m, x: (x, 1))
add("flatten", ["i"], label="1-D")
add("unflatten", ["it"], lambda m, x: (x, 1, (2, -1)))
add("squeeze", ["i1j"], label="all")
add("squeeze", ["i1j"], lambda m, x: (x, 1), label="dim")
add("squeeze", ["ij"], label="noop")
add("squeeze", ["ij"], lambda m, x: (x, 0), label="noop-dim")
add("unsqueeze", ["ij"], lambda m, x: (x, 0))
add("transpose swapaxes", ["ijk"], lambda m, x: (x, 0, 2))
add("transpose", ["ij"], lambda m, x: (x, 0, 0), label="noop")
add("permute", ["ijk"], lambda m, x: (x, (2, 0, 1)))
add("permute", ["ijk"], lambda m, x: (x, (0, 1, 2)), label="noop")
add("movedim moveaxis swapdims", ["ijk"], lambda m, x: (x, 0, 2))
add("movedim", ["ijk"], lambda m, x: (x, 1, 1), label="noop")
add("t", ["ij"])
add("t", ["i"], label="1-D")
add("T mT", ["ij"], where="a")
add("expand", ["1j"], lambda m, x: (x, 3, -1))
add("expand", ["ij"], lambda m, x: (x, tuple(x.shape)), label="noop")
add("broadcast_to", ["1j"], lambda m, x: (x, (3, x.shape[1])))
add("broadcast_to", ["ij"], lambda m, x: (x, tuple(x.shape)), label="noop")
add("expand_as", ["1j", "ij"])
add("view_as reshape_as", ["ij", "ji"])
add("narrow", ["ij"], lambda m, x: (x, 1, 0, min(2, x.shape[1])))
add("narrow", ["ij"], lambda m, x: (x, 0, 0, x.shape[0]), label="whole")
add("select", ["ij"], lambda m, x: (x, 1, 0))
add("diagonal", ["ij"])
add("diagonal", ["ijk"], lambda m, x: (x, 0, 1, 2), label="batched")
add("split", ["ij"], lambda m, x: (x, 2, 1))
add("split", ["ij"], lambda m, x: (x, x.shape[0] + 1), label="whole")
add("chunk", ["ij"], lambda m, x: (x, 2, 1))
add("chunk", ["ij"], lambda m, x: (x, 1), label="one")
add("tensor_split", ["ij"], lambda m, x: (x, 2, 1))
add("unbind", ["ij"], lambda m, x: (x, 1))
add("contiguous detach cpu float double", ["ij"], where="m")
add("contiguous", ["ji"], lambda m, x: (x.t(),), where="m", label="transposed")
add("half", ["ij"], where="m")
add("float", ["ij"], where="m", dtypes="s", label="float32")
add("long int short char byte bool", ["ij"], where="m")
add("to", ["ij"], lambda m, x: (x, m.dtype("float64")), where="m")
add("to", ["ij"], lambda m, x: (x, m.dtype("float32")), where="m", label="float32")
add("to", ["ij"], lambda m, x: (x, "cpu"), where="m", label="device")
add("to", ["ij"], lambda m, x: (x, m.dtype("float64"), KW(copy=True)), where="m",
    label="copy")
add("type", ["ij"], lambda m, x: (x, "torch.DoubleTensor"), where="m")
add("type", ["ij"], where="m", label="name")
add("type_as", ["ij", "ij"], where="m")
add("type_as", ["ij", "ij"], dtypes="fs", where="m", label="cast")
add("requires_grad_", ["ij"], where="m", grad=False)
add("flip", ["ij"], lambda m, x: (x, (0,)))
add("flip", ["ij"], lambda m, x: (x, (0, 1)), label="both")
add("roll", ["ij"], lambda m, x: (x, 1, 1))
add("roll", ["ij"], lambda m, x: (x, 0, 1), label="zero")
add("tile repeat", ["ij"], lambda m, x: (x, (2, 1)))
add("repeat", ["ij"], lambda m, x: (x, (1, 1)), label="ones")
add("tile", ["ij"], lambda m, x: (x, (1,)), label="ones")
add("repeat_interleave", ["ij"], lambda m, x: (x, 2, 1))
add("repeat_interleave", ["ij"], lambda m, x: (x, 1, 1), label="once")
add("tril triu", ["ij"])
add("tril triu", ["ij"], lambda m, x: (x, -1), label="offset")
add("diag_embed", ["ij"])
add("pad", ["ij"], lambda m, x: (x, ((1, 0), (0, 2))), where="f", tname=None)
add("pad", ["ij"], lambda m, x: (x, ((0, 0), (0, 0))), where="f", label="zero")
add("concat concatenate cat stack", ["ij", "ij"], lambda m, x, y: ([x, y], 1), where="f")
add("concat cat", ["ij"], lambda m, x: ([x], 0), where="f", label="one")
add("stack", ["ij"], lambda m, x: ([x],), where="f", label="one")
add("masked_fill", ["ij"], lambda m, x: (x, m.mask(x.shape), 0.5))
add("masked_select", ["ij"], lambda m, x: (x, m.mask(x.shape)))
add("masked_scatter", ["ij", "ij"], lambda m, x, s: (x, m.mask(x.shape), s))
add("take_along_dim", ["ij"], lambda m, x: (x, m.idx(index_array(x.shape, x.shape[1])), 1))
add("gather", ["ij"], lambda m, x: (x, 1, m.idx(index_array(x.shape, x.shape[1]))))
add("take_along_axis", ["ij"], lambda m, x: (x, m.idx(index_array(x.shape, x.shape[1])), 1),
    where="f")
add("index_select", ["ij"], lambda m, x: (x, 1, m.idx(perm_index(x.shape[1]))))
add("scatter scatter_add", ["ij", "ij"], lambda m, x, s: (
    x, 1, m.idx(index_array(x.shape, x.shape[1])), s))
add("scatter_reduce", ["ij", "ij"], lambda m, x, s: (
    x, 1, m.idx(index_array(x.shape, x.shape[1])), s, "amax"))
add("index_add", ["ij", "ij"], lambda m, x, s: (x, 1, m.idx(perm_index(x.shape[1])), s))
add("sum_to_size", ["ij"], lambda m, x: (x, 1, x.shape[1]))
add("sum_to_size", ["ij"], lambda m, x: (x, tuple(x.shape)), label="same")

# linear algebra on matrices
add("det inverse slogdet", ["ii"], init=_spd)
add("pinverse", ["ij"])
add("cholesky det slogdet inv", ["ii"], where="L", init=_spd)
add("cross", ["i3", "i3"], where="L", label="linalg")
add("matrix_power", ["ii"], lambda m, x: (x, 2), where="L", label="linalg")
add("eigh", ["ii"], where="L", init=_spd, exact=False)  # vectors: up to sign
add("qr svd svdvals pinv", ["ij"], where="L")
add("solve", ["ii", "ik"], where="L", init=_spd)
add("lstsq", ["ij", "ik"], where="L")
add("matmul", ["ij", "jk"], where="L")
add("norm vector_norm", ["ij"], where="L")
add("matrix_norm", ["ij"], where="L")

# creation and misc functions that take a tensor (or none)
add("zeros ones", [], lambda m: (2, 3, KW(dtype=m.dtype("float64"))), where="f")
add("arange", [], lambda m: (5,), where="f")
add("randn", [], lambda m: (2, 3, KW(dtype=m.dtype("float64"))), where="f", exact=False)
add("empty rand", [], lambda m: (2, 3, KW(dtype=m.dtype("float64"))), where="f", exact=False)
add("full", [], lambda m: ((2, 3), 1.5, KW(dtype=m.dtype("float64"))), where="f")
add("eye", [], lambda m: (3, KW(dtype=m.dtype("float64"))), where="f")
add("linspace logspace", [], lambda m: (0.0, 1.0, 5, KW(dtype=m.dtype("float64"))),
    where="f")
add("randint", [], lambda m: (0, 5, (2, 3)), where="f", exact=False)
add("randperm", [], lambda m: (4,), where="f", exact=False)
add("normal", [], lambda m: (0.0, 1.0, (2, 3), KW(dtype=m.dtype("float64"))), where="f",
    exact=False)
add("zeros_like ones_like", ["ij"], where="f")
add("empty_like rand_like randn_like", ["ij"], where="f", exact=False)
add("full_like", ["ij"], lambda m, x: (x, 2.0), where="f")
add("randint_like", ["ij"], lambda m, x: (x, 5), where="f", exact=False)
add("multinomial", ["ij"], lambda m, x: (x, 2), where="f", init=_prob, exact=False,
    grad=False)
add("meshgrid", ["i", "j"], lambda m, x, y: (x, y, KW(indexing="ij")), where="f")
add("as_tensor", ["ij"], lambda m, x: (x,), where="f")  # a tensor: itself
add("from_numpy", ["ij"], lambda m, x: (x.numpy().copy() if not m.torch else
                                        x.detach().numpy().copy(),), where="f")
add("tensor", ["ij"], lambda m, x: (x.numpy() if not m.torch else x.detach(),), where="f")
add("bernoulli", ["ij"], init=_prob, grad=False, exact=False)
add("new_zeros new_ones", ["ij"], lambda m, x: (x, (2, 3)), where="m")
add("new_empty", ["ij"], lambda m, x: (x, (2, 3)), where="m", exact=False)
add("new_full", ["ij"], lambda m, x: (x, (2, 3), 1.5), where="m")
add("new_tensor", ["ij"], lambda m, x: (x, [1.0, 2.0]), where="m")
add("checkpoint", ["ij"], lambda m, x: (lambda t: t.squeeze(), x), where="f",
    tname=None)
add("checkpoint_sequential", ["ij"], lambda m, x: ([lambda t: t[0], lambda t: t.squeeze()],
                                                   1, x), where="f")
add("primitive", ["ij"], lambda m, x: None if m.torch else pa.primitive(
    "identity", lambda a: a, lambda g, ans, a: g)(x), where="x")
add("Function", ["ij"], lambda m, x: None if m.torch else _Identity.apply(x), where="x")
add("Function", ["ij"], lambda m, x: None if m.torch else _Identity.apply(x[0]), where="x",
    label="view")

# introspection: no tensor result
add("dim ndimension numel nelement element_size is_contiguous is_floating_point is_complex "
    "stride storage_offset tolist numpy", ["ij"], where="m", grad=False)
add("data_ptr", ["ij"], where="m", exact=False)
add("item", ["1"], where="m")
add("numel", ["ij"], where="f", grad=False)  # torch.numel(x): an int
add("size dtype shape ndim grad grad_fn is_leaf requires_grad", ["ij"], where="a")
add("data", ["ij"], where="a")  # a Tensor sharing the memory, as in PyTorch

# in-place methods (return the tensor itself)
for _n in ("exp_ sqrt_ log_ abs_ relu_ sigmoid_ tanh_ square_ sin_ cos_ floor_ ceil_ trunc_ "
           "reciprocal_ rsqrt_ log1p_ expm1_ neg_ zero_").split():
    add(_n, ["ij"], where="m", init=_pos, inplace=True)
add("add_ sub_ mul_ div_ copy_", ["ij", "ij"], where="m", inplace=True)
add("fill_", ["ij"], lambda m, x: (x, 2.0), where="m", inplace=True)
add("clamp_ clip_", ["ij"], lambda m, x: (x, -0.5, 0.5), where="m", inplace=True)
add("addcmul_", ["ij", "ij", "ij"], where="m", inplace=True)
add("lerp_", ["ij", "ij"], lambda m, x, e: (x, e, 0.5), where="m", inplace=True)
add("scatter_ scatter_add_", ["ij", "ij"], lambda m, x, s: (
    x, 1, m.idx(index_array(x.shape, x.shape[1])), s), where="m", inplace=True)
add("index_add_", ["ij", "ij"], lambda m, x, s: (x, 1, m.idx(perm_index(x.shape[1])), s),
    where="m", inplace=True)
add("index_fill_", ["ij"], lambda m, x: (x, 1, m.idx([0]), 2.0), where="m", inplace=True)
add("masked_fill_", ["ij"], lambda m, x: (x, m.mask(x.shape), 2.0), where="m", inplace=True)
add("unsqueeze_", ["ij"], lambda m, x: (x, 0), where="m", inplace=True)
add("squeeze_", ["i1j"], where="m", inplace=True)
add("squeeze_", ["ij"], where="m", inplace=True, label="noop")
add("transpose_ swapaxes_", ["ij"], lambda m, x: (x, 0, 1), where="m", inplace=True)
add("t_", ["ij"], where="m", inplace=True)
add("uniform_ normal_ bernoulli_", ["ij"], where="m", inplace=True, exact=False)

# nn.functional
add("relu gelu silu sigmoid tanh softsign mish elu selu celu hardtanh hardsigmoid hardswish "
    "logsigmoid softplus leaky_relu", ["ij"], where="F")
add("softmax log_softmax glu", ["ij"], lambda m, x: (x, 1), where="F",
    sizes={"j": 4})
add("prelu", ["bcw", "c"], where="F")
add("linear", ["bi", "oi", "o"], where="F")
add("linear", ["bi", "oi"], where="F", label="nobias")
add("dropout", ["ij"], lambda m, x: (x, 0.0), where="F", label="p=0")
add("dropout", ["ij"], lambda m, x: (x, 0.5, False), where="F", label="eval")
add("conv1d", ["bcw", "oc3"], where="Ff")
add("conv2d", ["bcww", "oc33"], where="Ff")
add("conv3d", ["bcwww", "oc333"], where="Ff", sizes={"w": 4})
add("conv_transpose1d", ["bcw", "co3"], where="Ff")
add("conv_transpose2d", ["bcww", "co33"], where="Ff")
add("conv_transpose3d", ["bcwww", "co333"], where="Ff", sizes={"w": 3})
add("unfold", ["bcww"], lambda m, x: (x, 2), where="F")
add("fold", ["bct"], lambda m, x: (x, (3, 3), 2), where="F", sizes={"c": 4})
add("max_pool1d avg_pool1d", ["bcw"], lambda m, x: (x, 2), where="Ff")
add("max_pool2d avg_pool2d", ["bcww"], lambda m, x: (x, 2), where="Ff")
add("max_pool3d avg_pool3d", ["bcwww"], lambda m, x: (x, 2), where="Ff", sizes={"w": 4})
add("adaptive_max_pool1d adaptive_avg_pool1d", ["bcw"], lambda m, x: (x, 2), where="Ff")
add("adaptive_max_pool2d adaptive_avg_pool2d", ["bcww"], lambda m, x: (x, 2), where="F")
add("adaptive_max_pool3d adaptive_avg_pool3d", ["bcwww"], lambda m, x: (x, 2), where="F",
    sizes={"w": 4})
add("lp_pool1d", ["bcw"], lambda m, x: (x, 2.0, 2), where="F", init=_pos)
add("lp_pool2d", ["bcww"], lambda m, x: (x, 2.0, 2), where="F", init=_pos)
add("lp_pool3d", ["bcwww"], lambda m, x: (x, 2.0, 2), where="F", init=_pos, sizes={"w": 4})
add("max_unpool1d", ["bct"], lambda m, x: (x, m.idx(np.broadcast_to(
    2 * np.arange(x.shape[-1]), x.shape).copy()), 2), where="F")
add("max_unpool2d", ["bctt"], lambda m, x: (x, m.idx(np.broadcast_to(
    4 * x.shape[-1] * np.arange(x.shape[-2])[:, None] + 2 * np.arange(x.shape[-1]),
    x.shape).copy()), 2), where="F")
add("interpolate upsample", ["bcw"], lambda m, x: (x, None, 2.0), where="F")
add("interpolate", ["bcww"], lambda m, x: (x, None, 2.0, "bilinear", False), where="F",
    label="bilinear")
add("pixel_shuffle", ["b4ww"], lambda m, x: (x, 2), where="Ff")
add("pixel_unshuffle", ["bc44"], lambda m, x: (x, 2), where="Ff")
add("layer_norm", ["bij", "ij", "ij"], lambda m, x, w, b: (x, tuple(x.shape[1:]), w, b),
    where="F")
add("rms_norm", ["bij", "ij"], lambda m, x, w: (x, tuple(x.shape[1:]), w), where="F")
add("batch_norm", ["bcw", "c", "c"], lambda m, x, w, b: (
    x, None, None, w, b, True), where="F")
add("instance_norm", ["bcw"], where="F")
add("group_norm", ["bcw", "c", "c"], lambda m, x, w, b: (x, 1, w, b), where="F")
add("local_response_norm", ["bcw"], lambda m, x: (x, 2), where="F")
add("embedding", ["n", "ie"], lambda m, i, w: (m.idx(index_array(i.shape, w.shape[0])), w),
    where="F", grad=True)
add("pad", ["bcw"], lambda m, x: (x, (1, 2)), where="F")
add("embedding_bag", ["nj", "ie"], lambda m, i, w: (
    m.idx(index_array(i.shape, w.shape[0])), w), where="F", grad=True)
add("embedding", ["n", "ie"], lambda m, i, w: (w, m.idx(index_array(i.shape, w.shape[0]))),
    where="f", label="torch", grad=True)
add("dropout1d", ["bcw"], lambda m, x: (x, 0.5, False), where="F", label="eval")
add("dropout2d", ["bcww"], lambda m, x: (x, 0.5, False), where="F", label="eval")
add("dropout3d", ["bcwww"], lambda m, x: (x, 0.5, False), where="F", label="eval")
add("alpha_dropout feature_alpha_dropout", ["bcw"], lambda m, x: (x, 0.5, False), where="F",
    label="eval")
add("bilinear", ["bi", "bj", "oij", "o"], where="F")
add("normalize relu6", ["ij"], where="F")
add("unfold", ["ij"], lambda m, x: (x, 1, 2, 1), where="m", label="windows")
add("softmin", ["ij"], lambda m, x: (x, 1), where="F")
add("one_hot", ["i"], lambda m, x: (m.idx(index_array(x.shape, 4)), 4), where="F", grad=False)
add("upsample_nearest", ["bcww"], lambda m, x: (x, None, 2), where="F")
add("upsample_bilinear", ["bcww"], lambda m, x: (x, None, 2), where="F")
add("pad", ["bcw"], lambda m, x: (x, (0, 0)), where="F", label="zero")
add("pad", ["bcw"], lambda m, x: (x, (1, 1), "reflect"), where="F", label="reflect",
    sizes={"w": 4})
add("scaled_dot_product_attention", ["bhld", "bhsd", "bhse"], where="F")
add("scaled_dot_product_attention", ["bhld", "bhsd", "bhse"], lambda m, q, k, v: (
    q, k, v, None, 0.0, True), where="F", label="causal")
add("mse_loss l1_loss smooth_l1_loss huber_loss", ["ij", "ij"], where="F")
add("mse_loss l1_loss", ["ij", "ij"], lambda m, x, y: (x, y, KW(reduction="none")),
    where="F", label="none")
add("kl_div", ["ij", "ij"], lambda m, x, y: (x, y, KW(reduction="batchmean")), where="F")
add("binary_cross_entropy", ["ij", "ij"], where="F", init=_prob)
add("binary_cross_entropy_with_logits", ["ij", "ij"], where="F")
add("cross_entropy nll_loss", ["nc"], lambda m, x: (
    x, m.idx(index_array(x.shape[:1], x.shape[1]))), where="F")
add("cross_entropy", ["nc", "nc"], where="F", label="probabilities",
    init=_prob)
add("cosine_embedding_loss", ["nd", "nd"], lambda m, a, b: (
    a, b, m.t(np.where(index_array(a.shape[:1], 2), 1.0, -1.0))), where="F")
add("margin_ranking_loss", ["n", "n"], lambda m, a, b: (
    a, b, m.t(np.where(index_array(a.shape, 2), 1.0, -1.0))), where="F")
add("triplet_margin_loss", ["nd", "nd", "nd"], where="F")

# what the walk leaves out, and why (each a name, not an op that takes tensors)
SKIP = {
    # autograd and engine entry points: they run a backward, not an op
    "backward", "backward_parallel", "grad", "grad_parallel", "gradcheck", "gradgradcheck",
    "register_hook", "register_post_accumulate_grad_hook", "register_grad_ready_hook",
    "retain_grad", "zero_grad",
    # configuration, context managers, random state, files: no tensor input or output
    "default_engine", "get_default_engine", "set_default_engine", "detect_anomaly",
    "set_detect_anomaly", "is_anomaly_enabled", "is_anomaly_check_nan_enabled",
    "is_grad_enabled", "enable_grad", "no_grad", "set_grad_enabled", "manual_seed",
    "default_generator", "tune_allocator", "profile", "save", "load",
    # op-making helpers (tested with the primitive case below) and decorators
    "record", "once_differentiable",
}
# PyTorch's process settings and dtype queries (pa.runtime, pa.dtypes): no tensor input
# or output (tests/test_torch_runtime.py, test_dtypes.py); the device model's attributes
_SETTINGS = {
    "are_deterministic_algorithms_enabled", "use_deterministic_algorithms",
    "is_deterministic_algorithms_warn_only_enabled", "get_float32_matmul_precision",
    "set_float32_matmul_precision", "get_num_interop_threads", "set_num_interop_threads",
    "get_num_threads", "set_num_threads", "is_inference_mode_enabled", "get_default_dtype",
    "set_default_dtype", "can_cast", "promote_types", "result_type",
    "cuda", "device", "is_cpu", "is_cuda", "is_meta", "__format__",
}


def namespaces() -> dict:
    """form -> the names the walk must cover in that namespace."""
    funcs = {n for n in dir(pa) if not n.startswith("_")
             and callable(getattr(pa, n)) and not inspect.isclass(getattr(pa, n))}
    methods = {n for n in dir(pa.Tensor) if not n.startswith("_")} | {
        n for n in vars(pa.Tensor) if n.startswith("__") and n not in _PROTOCOL}
    return {"f": funcs, "m": methods, "F": set(F.__all__),
            "L": {n for n in pa.linalg.__all__ if not inspect.isclass(getattr(pa.linalg, n))}}


# Tensor's dunders that are Python's object protocol, not ops
_PROTOCOL = {"__init__", "__slots__", "__module__", "__doc__", "__weakref__", "__hash__",
             "__array_ufunc__", "__getstate__", "__setstate__", "__deepcopy__",
             "__annotations__", "__static_attributes__", "__firstlineno__", "__dict__"}


def forms(case: Case) -> list:
    """The forms a case runs in: its `where`, restricted to what pa has."""
    out = []
    for w in case.where:
        if w == "f" and hasattr(pa, case.name):
            out.append("f")
        elif w in "mo" and hasattr(pa.Tensor, case.name):
            out.append(w)
        elif w == "a" and hasattr(pa.Tensor, case.name):
            out.append("a")
        elif w == "F" and case.name in F.__all__:
            out.append("F")
        elif w == "L" and case.name in pa.linalg.__all__:
            out.append("L")
        elif w == "x":
            out.append("x")
    return out


def uncovered() -> dict:
    """Per namespace, the names no case covers and SKIP does not list."""
    covered = {"f": set(), "m": set(), "F": set(), "L": set()}
    for c in CASES:
        for w in forms(c):
            covered["m" if w in "moa" else "f" if w == "x" else w].add(c.name)
    left = SKIP | _SETTINGS
    return {k: sorted(v - covered[k] - left) for k, v in namespaces().items()
            if v - covered[k] - left}
