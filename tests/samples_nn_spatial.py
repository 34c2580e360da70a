"""Samples of the spatial ops of nn.functional (nn/_conv.py, nn/_pool.py, nn/_pool3d.py,
nn/_lppool.py, nn/_unpool.py, nn/_resample.py, nn/_pad.py; tests/op_samples.py says how
samples work): every option PyTorch has (stride, padding ints / 'same' / 'valid',
dilation, groups, depthwise, unbatched inputs, ceil_mode, count_include_pad,
divisor_override, output_padding, every interpolation mode, every padding mode with
negative widths), small enough for gradgradcheck.

`SAMPLES` holds the declared ops tests/test_registry.py walks; `COMPOSITES` the composites
(max pools and their indices, the 3-d pools, lp pools, max_unpool, upsample aliases) and
`INTERNAL` the non-exported declared ops (the convolution trio, the pools' selections,
avg_pool_backward, resample, pad_backward), which tests/test_nn_spatial.py checks the same
way (the registry's checks; PyTorch's values, indices and gradients for the composites).
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample


def normal(rng, *shape):
    return rng.standard_normal(shape)


def distinct(rng, *shape):
    """Values at least 0.1 apart, in random order: max pooling's winners are stable under
    finite differences."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) * 0.1).reshape(shape)


def positive(rng, *shape):
    return rng.uniform(0.5, 1.5, shape)


def _conv(nd):
    def samples(rng):
        sp = (5, 4, 3)[:nd]
        k = (3, 2, 2)[:nd]
        return [
            Sample(normal(rng, 2, 2, *sp), normal(rng, 3, 2, *k), normal(rng, 3)),
            Sample(normal(rng, 2, 2, *sp), normal(rng, 3, 2, *k), stride=2, padding=1),
            Sample(normal(rng, 2, 4, *sp), normal(rng, 4, 2, *k), normal(rng, 4),
                   padding="same", dilation=2 if nd < 3 else 1, groups=2),
            Sample(normal(rng, 2, 4, *sp), normal(rng, 4, 1, *k), padding=1,
                   groups=4),                                               # depthwise
            Sample(normal(rng, 3, *sp), normal(rng, 2, 3, *k), normal(rng, 2),
                   padding="valid"),                                        # unbatched
        ]
    return samples


def _conv_transpose(nd):
    def samples(rng):
        sp = (4, 3, 2)[:nd]
        k = (3, 2, 2)[:nd]
        n = 2 if nd < 3 else 1  # 3-D: one sample a batch (gradgradcheck took ~114 s loaded)
        return [
            Sample(normal(rng, n, 2, *sp), normal(rng, 2, 3, *k), normal(rng, 3)),
            Sample(normal(rng, n, 2, *sp), normal(rng, 2, 3, *k), stride=2, padding=1,
                   output_padding=1),
            Sample(normal(rng, n, 4, *sp), normal(rng, 4, 1, *k), normal(rng, 2), stride=2,
                   groups=2, dilation=2),
            Sample(normal(rng, 2, *sp), normal(rng, 2, 2, *k), stride=2,
                   output_padding=1),                                       # unbatched
        ]
    return samples


def _avg_pool(nd):
    def samples(rng):
        sp = (7, 6)[:nd]
        out = [Sample(normal(rng, 2, 2, *sp), kernel_size=2),
               Sample(normal(rng, 2, 2, *sp), kernel_size=3, stride=2, padding=1,
                      ceil_mode=True, count_include_pad=False),
               Sample(normal(rng, 2, *sp), kernel_size=3, stride=1, padding=1),  # unbatched
               Sample(normal(rng, 2, 2, *sp), kernel_size=3, stride=2, ceil_mode=True)]
        if nd == 2:
            out.append(Sample(normal(rng, 2, 2, *sp), kernel_size=(3, 2), stride=(2, 1),
                              padding=(1, 0), divisor_override=4))
        return out
    return samples


def _adaptive_avg(nd):
    def samples(rng):
        sp = (7, 6)[:nd]
        return [Sample(normal(rng, 2, 2, *sp), output_size=3),
                Sample(normal(rng, 2, *sp), output_size=5),
                Sample(normal(rng, 2, 2, *sp), output_size=(2, None) if nd == 2 else 7)]
    return samples


def _interpolate(rng):
    x3, x4, x5 = normal(rng, 2, 2, 5), normal(rng, 1, 2, 4, 3), normal(rng, 1, 1, 3, 2, 4)
    return [
        Sample(x3, size=8), Sample(x3, scale_factor=1.5, mode="nearest-exact"),
        Sample(x3, size=7, mode="linear"),
        Sample(x3, size=3, mode="linear", align_corners=True),
        Sample(x3, size=2, mode="area"),
        Sample(x4, size=(5, 7), mode="bilinear"),
        Sample(x4, size=(3, 2), mode="bilinear", align_corners=True),
        Sample(x4, scale_factor=1.7, mode="bilinear"),
        Sample(x4, scale_factor=(2, 1.5), mode="bicubic", recompute_scale_factor=True),
        Sample(x4, size=(6, 5), mode="bicubic", align_corners=True),
        Sample(x5, size=(4, 3, 5), mode="trilinear"), Sample(x5, size=(2, 2, 2), mode="area"),
        Sample(x5, scale_factor=2, mode="nearest"),
    ]


def _pad(rng):
    return [
        Sample(normal(rng, 2, 3, 5), pad=(2, 1)),
        Sample(normal(rng, 2, 3, 5), pad=(-1, 2), value=0.5),
        Sample(normal(rng, 2, 4, 5), pad=(1, -2, 0, 3), mode="reflect"),
        Sample(normal(rng, 2, 4, 5), pad=(2, -3), mode="reflect"),
        Sample(normal(rng, 2, 4, 5), pad=(-1, 2, 3, -1), mode="replicate"),
        Sample(normal(rng, 2, 4, 5), pad=(3, -1, -1, 1), mode="circular"),
        Sample(normal(rng, 1, 2, 3, 4, 3), pad=(1, 1, 2, 0, 0, 2), mode="replicate"),
        Sample(normal(rng, 2, 3, 4), pad=(1, 2, 1, 0), mode="circular"),
    ]


SAMPLES = {
    "conv1d": _conv(1), "conv2d": _conv(2), "conv3d": _conv(3),
    "conv_transpose1d": _conv_transpose(1), "conv_transpose2d": _conv_transpose(2),
    "conv_transpose3d": _conv_transpose(3),
    "unfold": lambda rng: [Sample(normal(rng, 2, 2, 4, 5), kernel_size=2),
                           Sample(normal(rng, 2, 4, 5), kernel_size=(2, 3), dilation=2,
                                  padding=1, stride=(1, 2))],
    "fold": lambda rng: [Sample(normal(rng, 2, 8, 12), output_size=(4, 5), kernel_size=2),
                         Sample(normal(rng, 12, 9), output_size=(4, 5), kernel_size=(2, 3),
                                dilation=1, padding=1, stride=(2, 2))],
    "avg_pool1d": _avg_pool(1), "avg_pool2d": _avg_pool(2),
    "adaptive_avg_pool1d": _adaptive_avg(1), "adaptive_avg_pool2d": _adaptive_avg(2),
    "interpolate": _interpolate,
    "pixel_shuffle": lambda rng: [Sample(normal(rng, 2, 8, 2, 3), upscale_factor=2),
                                  Sample(normal(rng, 9, 2, 1), upscale_factor=3)],
    "pixel_unshuffle": lambda rng: [Sample(normal(rng, 2, 2, 4, 6), downscale_factor=2),
                                    Sample(normal(rng, 1, 3, 3), downscale_factor=3)],
    "pad": _pad,
}


def _max_pool(nd):
    def samples(rng):
        sp = (7, 6, 5)[:nd]
        return [Sample(distinct(rng, 2, 2, *sp), 2),
                Sample(distinct(rng, 2, 2, *sp), 3, 2, 1, return_indices=True),
                Sample(distinct(rng, 2, *sp), 2, 1, dilation=2, ceil_mode=True),
                Sample(distinct(rng, 1, 2, *sp), 3, stride=2, ceil_mode=True,
                       return_indices=True)]
    return samples


def _adaptive_max(nd):
    def samples(rng):
        sp = (7, 6, 5)[:nd]
        return [Sample(distinct(rng, 2, 2, *sp), 3),
                Sample(distinct(rng, 2, *sp), 2, return_indices=True),
                Sample(distinct(rng, 1, 2, *sp), sp, True)]
    return samples


def _lp(nd):
    def samples(rng):
        sp = (6, 5, 4)[:nd]
        return [Sample(positive(rng, 2, 2, *sp), 2, 2), Sample(positive(rng, 2, *sp), 3, 3, 2),
                Sample(positive(rng, 1, 2, *sp), 1.5, 2, 1, True)]
    return samples


def _unpool(nd):
    def indices(rng, shape, per):
        """Distinct flat indices per plane (a repeated index makes PyTorch's scatter
        nondeterministic), all below `per`, the output plane's size."""
        planes, n = int(np.prod(shape[:-nd])), int(np.prod(shape[-nd:]))
        return np.stack([rng.permutation(per)[:n] for _ in range(planes)]).reshape(shape)

    def samples(rng):
        sp = (3, 2)[:nd]
        small = {1: 5, 2: 15}[nd]                   # kernel 3, stride 2, padding 1
        return [Sample(normal(rng, 2, 1, *sp), indices(rng, (2, 1) + sp, small), 2),
                Sample(normal(rng, 2, 1, *sp), indices(rng, (2, 1) + sp, small), 3, 2, 1),
                Sample(normal(rng, 1, *sp), indices(rng, (1,) + sp, small), 2,
                       output_size=(7, 5)[:nd])]
    return samples


COMPOSITES = {
    "max_pool1d": _max_pool(1), "max_pool2d": _max_pool(2), "max_pool3d": _max_pool(3),
    "adaptive_max_pool1d": _adaptive_max(1), "adaptive_max_pool2d": _adaptive_max(2),
    "adaptive_max_pool3d": _adaptive_max(3),
    "avg_pool3d": lambda rng: [Sample(normal(rng, 1, 2, 5, 4, 4), 2),
                               Sample(normal(rng, 2, 5, 4, 4), 3, 2, 1, True, False),
                               Sample(normal(rng, 1, 1, 4, 4, 5), (2, 3, 2), divisor_override=5)],
    "adaptive_avg_pool3d": lambda rng: [Sample(normal(rng, 1, 2, 5, 4, 3), 2),
                                        Sample(normal(rng, 2, 5, 4, 3), (3, None, 2))],
    "lp_pool1d": _lp(1), "lp_pool2d": _lp(2), "lp_pool3d": _lp(3),
    "max_unpool1d": _unpool(1), "max_unpool2d": _unpool(2),
    "upsample": lambda rng: [Sample(normal(rng, 1, 2, 3, 4), scale_factor=2),
                             Sample(normal(rng, 1, 2, 3, 4), (5, 6), mode="bilinear")],
    "upsample_nearest": lambda rng: [Sample(normal(rng, 1, 2, 3, 4), (5, 6))],
    "upsample_bilinear": lambda rng: [Sample(normal(rng, 1, 2, 3, 4), scale_factor=2)],
}


def _index(rng, shape, size):
    return rng.integers(0, size, shape)


INTERNAL = {
    "convolution": lambda rng: [
        Sample(normal(rng, 2, 4, 5, 6), normal(rng, 4, 2, 3, 2), stride=(2, 1),
               padding=(1, 0), dilation=(1, 2), groups=2, output_size=(3, 4)),
        Sample(normal(rng, 2, 5), normal(rng, 3, 2, 3), padding=2, output_size=(6,))],
    "conv_input_backward": lambda rng: [
        Sample(normal(rng, 2, 6, 3, 4), normal(rng, 6, 2, 3, 2), input_size=(2, 4, 5, 6),
               stride=(2, 1),
               padding=(1, 0), dilation=(1, 2), groups=2),
        Sample(normal(rng, 3, 6), normal(rng, 3, 2, 3), input_size=(2, 5), padding=2)],
    "conv_weight_backward": lambda rng: [
        Sample(normal(rng, 2, 4, 5, 6), normal(rng, 2, 6, 3, 4), weight_size=(6, 2, 3, 2),
               stride=(2, 1),
               padding=(1, 0), dilation=(1, 2), groups=2),
        Sample(normal(rng, 2, 5), normal(rng, 3, 6), weight_size=(3, 2, 3), padding=2)],
    "take_flat": lambda rng: [
        Sample(normal(rng, 2, 3, 4), rng.permutation(24)[:10].reshape(2, 5), unique=True),
        Sample(normal(rng, 2, 3, 4), _index(rng, (3, 4), 24))],
    "put_flat": lambda rng: [
        Sample(normal(rng, 2, 5), rng.permutation(24)[:10].reshape(2, 5), size=(2, 3, 4),
               accumulate=False),
        Sample(normal(rng, 3, 4), _index(rng, (3, 4), 24), size=(4, 6))],
    "avg_pool_backward": lambda rng: [
        Sample(normal(rng, 2, 2, 4, 4), input_size=(2, 2, 7, 6), nd=2, kernel_size=3,
               stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        Sample(normal(rng, 2, 2, 4), input_size=(2, 2, 7), nd=1, kernel_size=3, stride=2,
               padding=1),
        Sample(normal(rng, 2, 3, 3), input_size=(2, 7, 6), nd=2, kernel_size=2,
               divisor_override=3)],
    "resample": lambda rng: [
        Sample(normal(rng, 2, 3, 4), maps=((rng.uniform(0, 1, (5, 3)), None),
                                           (rng.uniform(0, 1, (2, 4)), None))),
        Sample(normal(rng, 2, 4), maps=((np.eye(4)[[0, 2, 2, 3, 1]],
                                         np.array([0, 2, 2, 3, 1])),))],
    "pad_backward": lambda rng: [
        Sample(normal(rng, 2, 3, 8), pad=(2, 1), mode="reflect", input_size=(2, 3, 5)),
        Sample(normal(rng, 2, 6, 4), pad=(1, -2, 0, 3), mode="circular", input_size=(2, 3, 5)),
        Sample(normal(rng, 2, 3, 6), pad=(-1, 2), mode="constant", input_size=(2, 3, 5))],
}
