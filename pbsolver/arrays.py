"""Array-library helpers: NumPy or CuPy in, the same library out (no import of CuPy needed)."""

from __future__ import annotations

import sys

import numpy as np

from pbsolver.exceptions import InputError


def array_module(a):
    """Return ``cupy`` for a CuPy array (CuPy already imported by the caller), else NumPy."""
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(a, cp.ndarray):
        return cp
    return np


def is_device_array(a) -> bool:
    """True for arrays that live on a CUDA device (CuPy arrays, numba device arrays)."""
    if array_module(a) is not np:
        return True
    return hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray)


def as_real_array(a, name: str, shape=None):
    """Return ``a`` as a real floating array of its own library, checking dtype, rank and shape.

    Integer input is promoted to float64; complex, boolean and object arrays are refused.
    Numba device arrays are wrapped as CuPy arrays (no copy).
    """
    if a is None:
        raise InputError(f"{name} is required")
    if is_device_array(a) and array_module(a) is np:
        import cupy as cp  # numba device array: CuPy wraps it without a copy

        a = cp.asarray(a)
    xp = array_module(a)
    if xp is np:
        try:
            a = np.asarray(a)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} is not an array of numbers: {exc}") from exc
    kind = a.dtype.kind
    if kind in "iu":
        a = a.astype(xp.float64)
    elif kind != "f":
        raise InputError(f"{name} must be a real floating array, got dtype {a.dtype}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        if a.ndim != len(shape):
            raise InputError(
                f"{name} must be a {len(shape)}-D array of shape {tuple(shape)}, "
                f"got a {a.ndim}-D array of shape {tuple(a.shape)}"
            )
        raise InputError(f"{name} has shape {tuple(a.shape)}, the grid needs {tuple(shape)}")
    return a


def first_bad_index(mask):
    """Index (tuple of ints) of the first True entry of a boolean array, on the host."""
    xp = array_module(mask)
    flat = int(xp.argmax(mask.ravel()))
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def to_numpy(a):
    """Copy any array to a NumPy array on the host."""
    xp = array_module(a)
    if xp is np:
        return np.asarray(a)
    return xp.asnumpy(a)


def flat_values(a, index) -> np.ndarray:
    """``a``'s values at the flat indices ``index``, as NumPy (only those leave a device)."""
    xp = array_module(a)
    return to_numpy(xp.asarray(a).reshape(-1)[xp.asarray(index)])


def require_real_numbers(a, name: str) -> None:
    """Refuse arrays whose dtype is not a real number type.

    Complex numbers, strings, bytes and object arrays holding those are refused before a
    float64 conversion would drop the imaginary part or parse the text.
    """
    kind = getattr(getattr(a, "dtype", None), "kind", None)
    if kind is None:
        try:
            kind = np.asarray(a).dtype.kind
        except (TypeError, ValueError):
            return  # the conversion that follows reports it
        a = np.asarray(a)
    if kind in "biuf":
        return
    if kind == "O":
        flat = np.asarray(a, dtype=object).ravel()
        if not any(isinstance(v, str | bytes | complex | np.complexfloating) for v in flat):
            return
    raise InputError(f"{name} must be real numbers, got dtype {a.dtype}")
