"""Vectorized error functions in numpy: `erf`, `erfc` and the standard normal CDF `ndtr`.

No Python call per element: the argument is cut into chunks of `_CHUNK` elements (the
temporaries stay in cache and bounded: an array of any size costs a few chunk-sized
buffers beyond the result) and each chunk is evaluated with whole-array ufuncs.

The approximations are fdlibm's (Sun's `s_erf.c`, as in FreeBSD and glibc), ported
interval by interval with the same coefficients, thresholds and order of operations, so
float64 results are within about 1 ulp of the true values (they agree with `math.erf`
to within 1 ulp; tests/test_erf.py measures it). On |x|:

  [0, 0.84375)      erf(x) = x + x*P(x^2)/Q(x^2)
  [0.84375, 1.25)   erf(|x|) = erx + P(s)/Q(s), s = |x| - 1
  [1.25, 1/0.35)    erfc(|x|) = exp(-z*z - 0.5625) * exp((z-|x|)(z+|x|) + R(1/x^2)/S(1/x^2)) / |x|
  [1/0.35, 28)      the same with a second pair R/S; z is |x| with its low 32 bits cleared
  beyond           erf = +-1 (from 6 on), erfc = 0 or 2 (from 28 on); NaN stays NaN

The interval nearest zero, where nearly all elements of typical activations lie, is
evaluated on the whole chunk; the other intervals only on the elements in them
(gathered by index), so a chunk costs about one rational function per element.

The coefficients below come from fdlibm, whose notice is kept as its licence asks:

  Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
  Developed at SunPro, a Sun Microsystems, Inc. business.
  Permission to use, copy, modify, and distribute this software is freely granted,
  provided that this notice is preserved.

Two departures from fdlibm in float64, measured against mpmath (tests/test_erf.py):
erfc's tail is summed into one exp with one final rounding (fdlibm's two exps, product and
division reached 2.3 ulp; now 1.6), and ndtr corrects the rounding of its argument
-x/sqrt 2, which the tail's condition number 2 t^2 amplified (1,563 ulp at x = -37; now
erfc's own error, ~2 ulp at most: fdlibm's middle intervals, not changed).

float32 erf is computed in float32 with fdlibm's single-precision method (s_erff.c,
FreeBSD's reduced-degree coefficients: 3 to 5 terms a polynomial where float64 needs 5 to
9): within 1 ulp of the correctly rounded float32 value (0.95 ulp of the exact one).
float32 erfc and ndtr are computed in float64 and rounded once (within 1 ulp: float64's
error is 2^-29 of a float32 ulp); `ndtr(fast=True)`, exact GELU's, keeps the float32
method: within 6 ulp (numpy's float32 exp, up to 2.4 ulp, twice in the tail), no float64
(and in float64 skips the argument's correction).
float16 inputs are computed in float64, chunk by chunk, and rounded; integer and boolean
inputs give float64.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .. import memory

__all__ = ["erf", "erfc", "ndtr"]

_CHUNK = 32768  # elements per chunk: 128 KiB of float64, so a chunk's temporaries stay in L2

_ERX = 8.45062911510467529297e-01  # erf(1) rounded to single precision
# Polynomials, highest degree first (evaluated by Horner, innermost term first, as fdlibm).
_PP = (-2.37630166566501626084e-05, -5.77027029648944159157e-03,
       -2.84817495755985104766e-02, -3.25042107247001499370e-01,
       1.28379167095512558561e-01)
_QQ = (-3.96022827877536812320e-06, 1.32494738004321644526e-04,
       5.08130628187576562776e-03, 6.50222499887672944485e-02,
       3.97917223959155352819e-01, 1.0)
_PA = (-2.16637559486879084300e-03, 3.54783043256182359371e-02,
       -1.10894694282396677476e-01, 3.18346619901161753674e-01,
       -3.72207876035701323847e-01, 4.14856118683748331666e-01,
       -2.36211856075265944077e-03)
_QA = (1.19844998467991074170e-02, 1.36370839120290507362e-02,
       1.26171219808761642112e-01, 7.18286544141962662868e-02,
       5.40397917702171048937e-01, 1.06420880400844228286e-01, 1.0)
_RA = (-9.81432934416914548592e+00, -8.12874355063065934246e+01,
       -1.84605092906711035994e+02, -1.62396669462573470355e+02,
       -6.23753324503260060396e+01, -1.05586262253232909814e+01,
       -6.93858572707181764372e-01, -9.86494403484714822705e-03)
_SA = (-6.04244152148580987438e-02, 6.57024977031928170135e+00,
       1.08635005541779435134e+02, 4.29008140027567833386e+02,
       6.45387271733267880336e+02, 4.34565877475229228821e+02,
       1.37657754143519042600e+02, 1.96512716674392571292e+01, 1.0)
_RB = (-4.83519191608651397019e+02, -1.02509513161107724954e+03,
       -6.37566443368389627722e+02, -1.60636384855821916062e+02,
       -1.77579549177547519889e+01, -7.99283237680523006574e-01,
       -9.86494292470009928597e-03)
_SB = (-2.24409524465858183362e+01, 4.74528541206955367215e+02,
       2.55305040643316442583e+03, 3.19985821950859553908e+03,
       1.53672958608443695994e+03, 3.25792512996573918826e+02,
       3.03380607434824582924e+01, 1.0)

_SMALL = 0.84375                                                # 0x3FEB0000 00000000
_MID = 1.25                                                     # 0x3FF40000 00000000
_TAIL = float(np.array(0x4006DB6E00000000, np.uint64).view(np.float64))  # ~1/0.35
_ERF_FLAT = 6.0     # erf(|x|) rounds to 1 from here on
_ERFC_FLAT = 28.0   # erfc(x) underflows to 0 from here on (and erfc(-x) rounds to 2)
_SQRT1_2 = math.sqrt(0.5)

# ndtr's argument -x/sqrt 2 in float64 rounds twice (the constant, then the product): a
# relative error up to ~2^-53 that erfc's condition number 2t^2 in the tail turns into
# 2 t^2 2^-53 relative (1,500 ulp at x = -37, measured against mpmath). The exact product
# is x c_hi + x c_lo, c_hi + c_lo = -1/sqrt 2 in double-double; its rounding error `lo`
# (Dekker's two-product: numpy has no fma) moves erfc by its derivative,
# erfc(t + lo) = erfc(t) - 2/sqrt(pi) exp(-t^2) lo (second-order terms below 2^-100).
_NEG_SQRT1_2_LO = 4.833646656726457e-17     # -1/sqrt 2 - (-sqrt(0.5)), from mpmath
_SPLIT = 134217729.0                        # 2^27 + 1: Veltkamp's splitter for float64
_C_HI = -_SQRT1_2
_C_HI_HIGH = _C_HI * _SPLIT - (_C_HI * _SPLIT - _C_HI)
_C_HI_LOW = _C_HI - _C_HI_HIGH
_TWO_OVER_SQRT_PI = 1.1283791670955126


class _Table(NamedTuple):
    """One precision's method: coefficients, thresholds and the working dtype."""
    dtype: type
    erx: float
    pp: tuple
    qq: tuple
    pa: tuple
    qa: tuple
    ra: tuple
    sa: tuple
    rb: tuple
    sb: tuple
    tail: float          # where the second R/S pair starts (~1/0.35)
    erf_flat: float      # erf(|x|) rounds to 1 from here on
    erfc_flat: float     # erfc(x) underflows to 0 from here on (erfc(-x) rounds to 2)
    high_mask: int       # clears the low bits of |x| so that z*z is exact


_F64 = _Table(np.float64, _ERX, _PP, _QQ, _PA, _QA, _RA, _SA, _RB, _SB, _TAIL,
              _ERF_FLAT, _ERFC_FLAT, 0xFFFFFFFF00000000)
# float32: fdlibm's single-precision method (s_erff.c) with its reduced-degree rational
# functions (FreeBSD's, each interval's error bound 2^-31 .. 2^-42 relative), evaluated in
# float32: 3 to 5 terms where float64 needs 5 to 9. tests/test_erf.py measures the error
# against the float64 functions.
_F32 = _Table(
    np.float32, 8.42697144e-01,
    (-1.86260219e-03, -3.36030394e-01, 1.28379166e-01),
    (-1.98859419e-03, 2.16070302e-02, 3.12324286e-01, 1.0),
    (1.10914491e-01, -1.65179938e-01, 4.15109694e-01, 3.64939137e-06),
    (5.62181212e-02, 1.68576106e-01, 5.35934687e-01, 6.02074385e-01, 1.0),
    (-1.43268085e+00, -2.17589188e+00, -5.53605914e-01, -9.87132732e-03),
    (-5.77397496e-02, 1.43113089e+00, 6.69798088e+00, 5.45995426e+00, 1.0),
    (-9.53764343e+00, -1.66696873e+01, -6.16498327e+00, -6.25171244e-01, -9.86494310e-03),
    (8.93033314e+00, 4.72810211e+01, 4.51839523e+01, 1.26884899e+01, 1.0),
    float(np.array(0x4036DB6E, np.uint32).view(np.float32)), 4.0, 11.0, 0xFFFFE000)


def _horner(z: np.ndarray, coeffs: tuple, out: np.ndarray) -> np.ndarray:
    """p(z) into `out`, coefficients highest degree first, innermost term first (fdlibm)."""
    np.multiply(z, coeffs[0], out=out)
    for c in coeffs[1:-1]:
        out += c
        out *= z
    out += coeffs[-1]
    return out


def _gather(x: np.ndarray, idx: np.ndarray, out: np.ndarray) -> np.ndarray:
    """x[idx] into `out`. mode="clip" (the indices are in range: they come from
    flatnonzero on x's own chunk) spares numpy's buffered copy that `out=` costs in the
    default mode="raise": 16 -> 9 us for 7,500 of 32,768 elements."""
    return np.take(x, idx, out=out, mode="clip")


def _small(x: np.ndarray, res: np.ndarray, t: np.ndarray, complement: bool,
           c: _Table) -> None:
    """erf(x) (or erfc(x)) for |x| < 0.84375 into `res`: x + x*y, y = P(x^2)/Q(x^2).
    `t`: two scratch rows as long as x. 22 passes over the chunk in float64 (erfc 24),
    16 in float32 (erfc 18)."""
    z, q = t[0], t[1]
    np.multiply(x, x, out=z)
    _horner(z, c.pp, res)
    res /= _horner(z, c.qq, q)
    res *= x                        # x*y
    if not complement:
        res += x
        return
    # erfc = 0.5 - (x*y + (x - 0.5)): fdlibm's form for x >= 1/4, used on the whole
    # interval (no select; 1.1 ulp below 1/4, where fdlibm's 1 - (x + x*y) has 0.9)
    np.subtract(x, 0.5, out=z)
    res += z
    np.subtract(0.5, res, out=res)


def _mid(x: np.ndarray, a: np.ndarray, res: np.ndarray, t: np.ndarray,
         complement: bool, c: _Table) -> None:
    """erf or erfc for 0.84375 <= |x| < 1.25 into `res`: erf(1 + s) = erx + P(s)/Q(s)."""
    s = np.subtract(a, 1, out=t[0])
    _horner(s, c.pa, res)
    res /= _horner(s, c.qa, t[1])
    if not complement:
        res += c.erx
        np.copysign(res, x, out=res)
        return
    # erfc = (1 - erx) - P/Q for x > 0, (1 + erx) + P/Q for x < 0 (1 -+ erx is exact)
    sg = np.sign(x, out=t[0])
    res *= sg
    sg *= c.erx
    np.subtract(1, sg, out=sg)
    np.subtract(sg, res, out=res)


def _tail(x: np.ndarray, a: np.ndarray, res: np.ndarray, t: np.ndarray, complement: bool,
          far: bool, c: _Table, lo: np.ndarray | None = None) -> None:
    """erf or erfc for |x| >= 1.25 into `res`, from erfc(|x|) = exp(-x^2 - 0.5625 + R/S)/|x|
    with R/S rational in 1/x^2; `far`: the second pair (|x| >= 1/0.35). 5 scratch rows.
    `lo` (erfc only): the rounding error of x (x + lo is the argument meant), which moves
    the exponent by -2 x lo: ndtr's scaled argument in float32, whose rounding would
    otherwise cost up to 2 x^2 2^-24 relative (170 ulp at x = -11)."""
    s, r, w, z = t[0], t[1], t[2], t[3]
    np.multiply(a, a, out=w)
    np.divide(1, w, out=s)
    _horner(s, c.rb if far else c.ra, r)
    r /= _horner(s, c.sb if far else c.sa, t[4])
    if not complement:
        # erf = 1 - erfc: the rounding of x*x (relative 2^-53 of erfc <= 0.077; float32:
        # 2^-24 x^2 of erfc, at most 0.15 ulp of erf) is below an ulp of erf, so one exp
        w += 0.5625
        np.subtract(r, w, out=w)
        np.exp(w, out=w)
        w /= a
        np.subtract(1, w, out=res)
        np.copysign(res, x, out=res)
        return
    if c.dtype is np.float64:
        _tail_erfc64(x, a, res, t)
        return
    # -x*x in two exact parts: z is |x| with the low bits of its mantissa cleared (32 of
    # float64's, 13 of float32's), so z*z is exact and (z - a)*(z + a) carries the rest.
    u = np.uint64 if c.dtype is np.float64 else np.uint32
    np.bitwise_and(a.view(u), u(c.high_mask), out=z.view(u))
    np.subtract(z, a, out=w)
    np.add(z, a, out=s)
    w *= s
    w += r
    if lo is not None:
        np.multiply(x, lo, out=s)
        s *= 2
        w -= s
    np.exp(w, out=w)
    np.multiply(z, z, out=z)
    z += 0.5625
    np.negative(z, out=z)
    np.exp(z, out=z)
    z *= w
    z /= a                          # erfc(|x|)
    # erfc(x) = z for x > 0, 2 - z for x < 0: (1 - sign) + sign*z, exactly
    sg = np.sign(x, out=s)
    z *= sg
    np.subtract(1, sg, out=res)
    res += z


def _split(v: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """Veltkamp's split of v into hi (26 significant bits) + lo, exactly (|v| < 2^996)."""
    np.multiply(v, _SPLIT, out=lo)
    np.subtract(lo, v, out=hi)
    np.subtract(lo, hi, out=hi)
    np.subtract(v, hi, out=lo)


def _tail_erfc64(x: np.ndarray, a: np.ndarray, res: np.ndarray, t: np.ndarray) -> None:
    """erfc(x) for 1.25 <= |x| < 28 in float64 into `res`, t[1] holding R/S (6 rows).

    fdlibm's two exps, product and division (2.3 ulp against mpmath) become one exp and
    one final rounding: the exponent -z^2 - 0.5625 + ((z - a)(z + a) + R/S) is summed
    exactly into s + err (Fast2Sum: its first part is exact and the larger), and
    exp(s)(1 + err)/a is q + (e - q a + e err)/a, e = exp(s), q = e/a rounded, with
    e - q a exact (q and a split in halves whose products are exact: numpy has no fma).
    What is left is exp's own rounding (glibc: ~0.5 ulp), R/S's and the final rounding.
    22 passes over the elements (fdlibm's: 16)."""
    hh, r, b, c, d, f = t[0], t[1], t[2], t[3], t[4], t[5]
    np.bitwise_and(a.view(np.uint64), np.uint64(_F64.high_mask), out=c.view(np.uint64))
    np.subtract(c, a, out=b)
    np.add(c, a, out=d)
    b *= d
    b += r                                  # L = (z - a)(z + a) + R/S
    np.multiply(c, c, out=hh)
    hh += 0.5625
    np.negative(hh, out=hh)                 # H = -z^2 - 0.5625, exact
    np.add(hh, b, out=r)                    # s
    np.subtract(hh, r, out=hh)
    hh += b                                 # err = (H - s) + L, exactly
    np.exp(r, out=b)                        # e
    hh *= b                                 # e err
    np.divide(b, a, out=r)                  # q
    _split(r, d, f)                         # q = d + f
    _split(a, c, r)                         # a = c + r
    for u, v in ((d, c), (d, r), (f, c), (f, r)):
        np.multiply(u, v, out=res)
        b -= res                            # e - q a: the first step exact (Sterbenz)
    b += hh
    b /= a
    d += f                                  # q, exactly
    d += b
    sg = np.sign(x, out=b)                  # erfc(x) = (1 - sign) + sign erfc(|x|)
    d *= sg
    np.subtract(1, sg, out=res)
    res += d


def _outer(x: np.ndarray, a: np.ndarray, res: np.ndarray, t: np.ndarray,
           complement: bool, c: _Table, lo: np.ndarray | None = None) -> None:
    """erf or erfc for |x| >= 0.84375 (or NaN) into `res`, interval by interval. `t` has
    7 scratch rows at least as long as x. For erf one R/S pair covers [1.25, erf_flat):
    in float64 the near pair is accurate to 0.5 ulp of erf there (erfc's relative error
    of 5e-11 at |x| = 6 is below an ulp of 1); float32 keeps fdlibm's two pairs."""
    flat = c.erfc_flat if complement else c.erf_flat
    if complement or c.dtype is np.float32:
        parts = ((_SMALL, _MID, 0), (_MID, c.tail, 1), (c.tail, flat, 2))
    else:
        parts = ((_SMALL, _MID, 0), (_MID, flat, 1))
    for start, stop, part in parts:
        sel = np.flatnonzero((a >= start) & (a < stop))
        n = sel.size
        if not n:
            continue
        xs, as_, v = _gather(x, sel, t[0, :n]), _gather(a, sel, t[1, :n]), t[2, :n]
        if part == 0:
            _mid(xs, as_, v, t[3:, :n], complement, c)
        else:
            ls = None if lo is None else _gather(lo, sel, t[8, :n])
            _tail(xs, as_, v, t[3:, :n], complement, part == 2, c, ls)
        res[sel] = v
    sel = np.flatnonzero(~(a < flat))   # erf = sign(x); erfc = 1 - sign(x); NaN stays NaN
    if sel.size:
        v = np.sign(x[sel])
        res[sel] = 1 - v if complement else v


def _chunk(x: np.ndarray, out: np.ndarray, complement: bool, half: bool,
           t: np.ndarray, c: _Table, unscaled=None) -> None:
    """Write erf(x) (or erfc(x), halved if `half`) of a 1-D chunk of `c.dtype` into `out`,
    which may be `x` itself. `t`: scratch rows (`_ROWS` x at least len(x), `c.dtype`).
    `unscaled`: (x0, scale) with x = x0 * scale rounded to float32, whose rounding error
    the tail corrects (erfc only)."""
    n = x.size
    a = np.abs(x, out=t[0, :n])
    idx = np.flatnonzero(a >= _SMALL)   # NaN is not: the small formula gives NaN for it
    m = idx.size
    if m:
        xo, ao = _gather(x, idx, t[1, :m]), _gather(a, idx, t[2, :m])
    res = t[3, :n] if np.may_share_memory(x, out) else out
    if m < n:                       # whole chunk; outer elements overwritten below
        _small(x, res, t[4:, :n], complement, c)
    if m:
        vo, lo = t[4, :m], None
        if unscaled is not None and c.dtype is np.float32:
            x0, scale = unscaled
            lo = np.multiply(_gather(x0, idx, t[13, :m]), scale, dtype=np.float64)
            lo -= xo
            lo = lo.astype(c.dtype)
        _outer(xo, ao, vo, t[5:, :m], complement, c, lo)
        res[idx] = vo
    if unscaled is not None and c.dtype is np.float64:
        _argument_correction(unscaled[0], res, t[4:9, :n], idx)
    if half:
        res *= 0.5
    if res is not out:
        out[...] = res


def _argument_correction(x0: np.ndarray, res: np.ndarray, t: np.ndarray,
                         outer: np.ndarray) -> None:
    """res (erfc(t), t = x0 * -sqrt(0.5) rounded) += the error of t's rounding times
    erfc's derivative -2/sqrt(pi) exp(-t^2). `t`: 5 scratch rows; `outer`: the indices
    of |t| >= 0.84375, where exp(-t^2) is computed (numpy's float64 exp is scalar here);
    below, 1 - u + u^2/2 - u^3/6 (u = t^2 < 0.72: within 1% of exp(-u), ample for a
    correction of at most an ulp). |x0| is clipped to 64 first (beyond, exp(-t^2) is 0
    and the split would overflow); NaN stays NaN in `res`. 20 passes over the chunk."""
    xc, p, hi, lo, e = t[0], t[1], t[2], t[3], t[4]
    np.clip(x0, -64.0, 64.0, out=xc)
    np.multiply(xc, _C_HI, out=p)
    _split(xc, hi, lo)
    # err = ((hi ch - p) + hi cl + lo ch) + lo cl, then + x c_lo: the product's error
    np.multiply(hi, _C_HI_HIGH, out=e)
    e -= p
    hi *= _C_HI_LOW
    e += hi
    np.multiply(lo, _C_HI_HIGH, out=hi)
    e += hi
    lo *= _C_HI_LOW
    e += lo
    np.multiply(xc, _NEG_SQRT1_2_LO, out=lo)
    e += lo                                 # t's error: exact t = p + e
    np.multiply(p, p, out=p)
    _horner(p, (-1 / 6, 0.5, -1.0, 1.0), hi)    # exp(-u), |t| < 0.84375
    m = outer.size
    if m:
        v = _gather(p, outer, xc[:m])
        np.negative(v, out=v)
        hi[outer] = np.exp(v, out=v)
    hi *= e
    hi *= _TWO_OVER_SQRT_PI
    res -= hi


_ROWS = 14  # scratch rows: a, outer x and |x|, result copy, 9 for the intervals, 1 for
# the unscaled argument


def _evaluate(x, out, complement: bool, scale: float, half: bool,
              fast: bool = False) -> np.ndarray:
    """erf/erfc of `scale * x` (halved if `half`) over chunks, into `out` or a new array
    of x's float dtype (float64 for other dtypes). float32 erf (and erfc/ndtr if `fast`)
    is computed in float32 (`_F32`), the rest in float64 (float32 and float16 rounded at
    the end: within 1 ulp, float64's error being 2^-29 of float32's ulp). Not split over
    threads (`intraop`): with ~50 ufunc calls a chunk, two threads measured slower than
    one (6.7 -> 7.3 ms on 524k elements, 2026-11-23)."""
    x = np.asarray(x)
    if out is None:
        out = memory.empty(x.shape, x.dtype if x.dtype.kind == "f" else np.float64)
    elif out.shape != x.shape:
        raise ValueError(f"out has shape {out.shape}, expected {x.shape}")
    f32 = x.dtype == np.float32 and out.dtype == np.float32
    c = _F32 if f32 and (fast or not complement) else _F64
    _evaluate_range(x, out, complement, scale, half, c, fast)
    return out


def _evaluate_range(x, out, complement: bool, scale: float, half: bool, c: _Table,
                    fast: bool = False) -> None:
    # float32: chunks of the same bytes, twice the elements (the ~80 ufunc calls a chunk
    # cost about as much as its arithmetic at 32k float32 elements: 102 -> 73 ms for
    # ndtr of 4M elements, CPU time)
    chunk = _CHUNK * 8 // np.dtype(c.dtype).itemsize
    t = memory.empty((_ROWS, min(chunk, max(x.size, 1))), c.dtype)
    it = np.nditer([x, out], flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["readonly"], ["writeonly"]], op_dtypes=[c.dtype] * 2,
                   casting="same_kind", buffersize=chunk)
    u = np.empty(0, c.dtype)
    with it, np.errstate(all="ignore"):  # the small formula on outer elements, underflow
        for xc, oc in it:
            if scale != 1:
                if u.size < xc.size:
                    u = memory.empty(xc.size, c.dtype)
                x0, xc = xc, np.multiply(xc, scale, out=u[:xc.size])
            low = complement and scale != 1 and (c is _F32 or not fast)
            _chunk(xc, oc, complement, half, t, c, (x0, scale) if low else None)


def erf(x, out: np.ndarray | None = None) -> np.ndarray:
    """The error function, elementwise; float64 within about 1 ulp (fdlibm's method).

    `out` (same shape, a float dtype) receives the result and may be `x` itself.
    """
    return _evaluate(x, out, False, 1.0, False)


def erfc(x, out: np.ndarray | None = None) -> np.ndarray:
    """1 - erf(x) without cancellation (accurate down to ~1e-308, where it underflows):
    float64 within ~2 ulp, float32 (computed in float64) within 1 ulp."""
    return _evaluate(x, out, True, 1.0, False)


def ndtr(x, out: np.ndarray | None = None, *, fast: bool = False) -> np.ndarray:
    """The standard normal CDF, 0.5 * erfc(-x / sqrt(2)): accurate in the lower tail too
    (where 0.5 * (1 + erf(x / sqrt(2))) cancels to 0). `out` may be `x` itself.

    float64 within ~2 ulp (the rounding of -x/sqrt 2 corrected); float32 computed in
    float64, within 1 ulp. `fast` (exact GELU's, whose lower tail PyTorch rounds to 0
    anyway): float32 in float32 with fdlibm's single-precision method, within 6 ulp,
    3x faster; float64 without the argument's correction (erfc's condition number 2 t^2
    then amplifies its rounding: 2 t^2 ulp in the lower tail), 1.5x faster."""
    return _evaluate(x, out, True, -_SQRT1_2, True, fast)
