"""Reading Paddle weight files (``*.pdparams``, ``*.pdopt``) without running code from them.

Why this exists: ``paddle.load`` is ``pickle.load``, and a pickle names Python callables that the loader calls
while reading; a ``model_state.pdparams`` someone hands us could run any command (``os.system``) the moment
its weights are read, even by ``status``.  Paddle's own files need very little: ``paddle.save`` turns every
tensor of a state dict into a numpy array (and any other tensor into a ``(name, array)`` tuple), the rest is
dicts, lists, strings and numbers.  So weights are unpickled here with an allow-list of exactly the globals
those need, as PyTorch's ``torch.load(weights_only=True)`` does; a file that names anything else is refused,
naming the file and the global, before any of it is called.  Every weights file a user or a handed-over runs
directory supplies is read through :func:`load` / :func:`load_state_dict` before Paddle's loader sees it.
"""

from __future__ import annotations

import _codecs
import collections
import pickle
from pathlib import Path

import numpy as np

from pipeline.errors import ModelError

NAME_TABLE = "StructuredToParameterName@@"  # paddle.save's table of parameter names (dropped, as paddle.load does)
BIG_PARAMS = "UnpackBigParamInfor@@"  # paddle.save (protocol 2/3) splits arrays over 1 GiB into slices


class UnsafeWeights(ModelError):
    """A weights file that would run code (it names a Python global outside the allow-list) or exhaust the machine
    (containers shared or nested as no weights file has) when read: refused, nothing of it is run or walked."""


class _NdarrayToken:
    """Stands for numpy.ndarray, which a pickle only needs as _reconstruct's argument: not a type, so the pickle
    cannot call ndarray(...) itself (NEWOBJ) to allocate an array of any shape."""

    __name__ = "ndarray"


_NDARRAY = _NdarrayToken()


def _reconstruct(subtype, shape, dtype):
    # What ndarray.__reduce__ writes: _reconstruct(ndarray, (0,), b'b'), then __setstate__ fills in the data.
    # Anything else (a subclass, a huge empty shape to allocate) is no array numpy itself pickled.
    if subtype is not _NDARRAY or shape != (0,):
        raise pickle.UnpicklingError(f"unexpected array reconstruction ({getattr(subtype, '__name__', subtype)!r}, {shape!r})")
    return np.core.multiarray._reconstruct(np.ndarray, shape, dtype)


# (module, name) -> the object; numpy 2 writes numpy._core.* for numpy.core.*.
ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # every ndarray (numpy's own pickling)
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): _NDARRAY,  # the type _reconstruct is given
    ("numpy", "dtype"): np.dtype,  # every array's dtype
    ("numpy.core.multiarray", "scalar"): np.core.multiarray.scalar,  # numpy scalars (np.float32(...)) in a state dict
    ("numpy._core.multiarray", "scalar"): np.core.multiarray.scalar,
    ("collections", "OrderedDict"): collections.OrderedDict,  # state dicts of older Paddle/PaddleNLP versions
    ("builtins", "tuple"): tuple,  # paddle.save's form of a tensor outside a state dict: tuple((name, array))
    ("_codecs", "encode"): _codecs.encode,  # protocol-2 pickles store bytes as latin-1 text
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh, path: Path):
        super().__init__(fh, encoding="latin1")  # as paddle.load (arrays pickled by Python 2)
        self.path = path

    def find_class(self, module: str, name: str):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise UnsafeWeights(
                f"{self.path}: refused: the file asks to call {module}.{name}, which no Paddle weights file needs "
                "(a pickle can run code when it is read; only numpy arrays, dicts, lists, strings and numbers are accepted)"
            ) from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent ids (not a Paddle weights file)")


# A state dict is shallow (a dict of arrays; an optimizer state one or two levels more) and no container in it is
# reached twice.  A pickle can share one container at many places ("billion laughs": 40 levels of {'a': y, 'b': y}
# in 418 bytes) so that a naive walk never ends; these bounds and the shared-container check refuse it at once.
MAX_DEPTH = 32
MAX_NODES = 5_000_000


def load(path: Path):
    """What ``paddle.load(path, return_numpy=True)`` gives for a pickled Paddle file, read with the allow-list.

    Raises :class:`UnsafeWeights` for a disallowed global, :class:`ModelError` for an unreadable file or one whose
    structure no weights file has (a container reached twice, nesting over ``MAX_DEPTH``, over ``MAX_NODES`` values)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            obj = _Unpickler(fh, path).load()
        _check_structure(path, obj)  # first: every later walk may then trust it is a small tree
        obj = _as_paddle_loads(obj)
    except ModelError:  # UnsafeWeights included
        raise
    except Exception as exc:  # truncated, not a pickle, a directory, a malformed big-parameter table, too deep ...
        raise ModelError(f"{path}: cannot read weights ({type(exc).__name__}: {exc})") from None
    return obj


def load_state_dict(path: Path) -> dict[str, np.ndarray]:
    """A model's state dict (parameter name -> numpy array), read with the allow-list."""
    state = load(path)
    if not isinstance(state, dict):
        raise ModelError(f"{path}: not a state dict (the file holds a {type(state).__name__}, expected a mapping of "
                         "parameter names to arrays)")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, np.ndarray):
            raise ModelError(f"{path}: not a state dict: entry {key!r} is a {type(value).__name__}, expected an array")
    return dict(state)


def _as_paddle_loads(obj):
    """paddle.load's post-processing (return_numpy=True): big parameters re-joined, the name table dropped,
    tuple(name, array) tensors turned into their arrays."""
    if isinstance(obj, dict) and BIG_PARAMS in obj:
        for key, info in obj.pop(BIG_PARAMS).items():
            obj[key] = np.concatenate([obj.pop(part) for part in info["slices"]]).reshape(info["OriginShape"])
    if isinstance(obj, dict) and NAME_TABLE in obj:
        del obj[NAME_TABLE]
        return obj
    return _tensors_to_arrays(obj)


def _is_tensor(obj) -> bool:
    """paddle.save's form of a tensor outside a state dict: tuple(name, array)."""
    return isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], np.ndarray)


def _tensors_to_arrays(obj):
    if _is_tensor(obj):
        return obj[1]
    if isinstance(obj, dict):
        for k in list(obj):
            obj[k] = _tensors_to_arrays(obj[k])
        return obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tensors_to_arrays(v) for v in obj)
    return obj


def _check_structure(path: Path, obj) -> None:
    """The unpickled object is a tree of dicts, lists and tuples over numeric arrays, strings and numbers: no
    container reached twice (a tensor's (name, array) may be: paddle.save shares a tensor saved at two places), at most ``MAX_DEPTH`` deep and ``MAX_NODES`` values in all, no array of Python objects.
    One iterative pass, each container visited once: a 418-byte pickle cannot make it run for ever."""
    seen: set[int] = set()
    stack = [(obj, 0)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise UnsafeWeights(f"{path}: refused: more than {MAX_NODES:,} values (not a Paddle weights file)")
        if isinstance(node, np.ndarray):
            if node.dtype.hasobject:
                raise ModelError(f"{path}: holds an array of Python objects, not numbers (not a Paddle weights file)")
            continue
        if _is_tensor(node):  # (name, array): one tensor, which paddle.save shares where it is saved twice
            stack.append((node[1], depth + 1))
            continue
        if isinstance(node, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                raise UnsafeWeights(f"{path}: refused: containers nested over {MAX_DEPTH} deep (not a Paddle weights file)")
            if node and id(node) in seen:  # an empty tuple is one shared object in Python itself
                raise UnsafeWeights(f"{path}: refused: one {type(node).__name__} appears at several places, which no "
                                 "weights file has (a pickle that shares containers can expand without end)")
            seen.add(id(node))
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
