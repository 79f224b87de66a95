"""Mixed-precision policy: which dtype parameters, computation, activations and outputs use.

A ``Policy`` is a frozen dataclass (hashable, usable in a model config and as a static jit
argument). String forms::

    Policy.parse("params=float32,compute=bfloat16,output=float32")
    Policy.parse("mixed_bfloat16")   # params float32, compute bfloat16, output float32
    Policy.parse("mixed_float16")    # params float32, compute float16, output float32
    Policy.parse("float32")          # everything float32
    Policy.parse("mixed_bfloat16,activations=float32")   # a short name with one field changed

Rule of use in textkit models: parameters are stored in ``param_dtype``; matmul/conv inputs are
cast to ``compute_dtype`` (accumulating in float32); the activations between layers (``Dense``
and embedding outputs, the residual stream, layer-norm outputs, elementwise work) are in
``Policy.activations``: ``activation_dtype`` where the policy names one (``activations=...``),
otherwise the compute dtype on accelerators and float32 on a CPU backend, where XLA:CPU's 16-bit
elementwise work is slower than float32 (``SIXTEEN_BIT_ACTIVATION_BACKENDS``); norm statistics,
softmax, logits and losses run in float32; the model's returned values are cast to
``output_dtype``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_DTYPE_NAMES = {
    "float32": jnp.float32, "f32": jnp.float32, "fp32": jnp.float32,
    "bfloat16": jnp.bfloat16, "bf16": jnp.bfloat16,
    "float16": jnp.float16, "f16": jnp.float16, "fp16": jnp.float16, "half": jnp.float16,
}
_SHORT_NAMES = {
    "float32": ("float32", "float32", "float32"),
    "mixed_bfloat16": ("float32", "bfloat16", "float32"),
    "mixed_float16": ("float32", "float16", "float32"),
    "bfloat16": ("bfloat16", "bfloat16", "bfloat16"),
    "float16": ("float16", "float16", "float16"),
}
SIXTEEN_BIT_ACTIVATION_BACKENDS = ("gpu", "cuda", "rocm", "tpu")
"""Backends on which an unset ``activation_dtype`` means the compute dtype (16-bit activations
halve the bytes of every elementwise op there); elsewhere (XLA:CPU) it means float32."""

_KEYS = {"params": "param_dtype", "param": "param_dtype", "p": "param_dtype",
         "compute": "compute_dtype", "c": "compute_dtype",
         "output": "output_dtype", "o": "output_dtype",
         "activations": "activation_dtype", "a": "activation_dtype"}


def _dtype(name: str) -> Any:
    try:
        return _DTYPE_NAMES[name.strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; expected one of {sorted(set(_DTYPE_NAMES))}") from None


@dataclasses.dataclass(frozen=True)
class Policy:
    """Four dtypes: parameters, computation, outputs and activations (numpy/jnp dtype
    classes); ``activation_dtype`` None lets the backend decide (``activations``)."""

    param_dtype: Any = jnp.float32
    compute_dtype: Any = jnp.float32
    output_dtype: Any = jnp.float32
    activation_dtype: Any = None

    @property
    def activations(self) -> Any:
        """The dtype of the activations between layers: ``activation_dtype`` if set, else the
        compute dtype on a backend of ``SIXTEEN_BIT_ACTIVATION_BACKENDS`` and float32 on
        others (read at trace time)."""
        if self.activation_dtype is not None:
            return self.activation_dtype
        if jax.default_backend() in SIXTEEN_BIT_ACTIVATION_BACKENDS:
            return self.compute_dtype
        return jnp.float32

    @classmethod
    def parse(cls, spec: str | Policy) -> Policy:
        """Build a policy from a short name, ``"params=..,compute=..,output=..,activations=.."``
        (unnamed fields float32; activations: the compute dtype), or a short name followed by
        such fields (``"mixed_bfloat16,activations=float32"``)."""
        if isinstance(spec, Policy):
            return spec
        parts = [part.strip() for part in spec.strip().lower().split(",")]
        fields: dict[str, Any] = {}
        if parts[0] in _SHORT_NAMES:
            names = dict(zip(("param_dtype", "compute_dtype", "output_dtype"),
                             _SHORT_NAMES[parts.pop(0)]))
            fields = {field: _dtype(name) for field, name in names.items()}
        for part in parts:
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in _KEYS:
                raise ValueError(
                    f"cannot parse precision policy {spec!r}: expected a short name "
                    f"{sorted(_SHORT_NAMES)} and / or 'params=<dtype>,compute=<dtype>,"
                    f"output=<dtype>,activations=<dtype>'")
            fields[_KEYS[key.strip()]] = _dtype(value)
        return cls(**fields)

    def __str__(self) -> str:
        dtypes = (self.param_dtype, self.compute_dtype, self.output_dtype)
        text = "params={},compute={},output={}".format(*(np.dtype(d).name for d in dtypes))
        if self.activation_dtype is not None:
            text += f",activations={np.dtype(self.activation_dtype).name}"
        return text

    @property
    def needs_loss_scaling(self) -> bool:
        """True when gradients flow through float16 and need dynamic loss scaling."""
        return np.dtype(self.compute_dtype) == np.dtype(jnp.float16)

    def cast_to_param(self, tree: Any) -> Any:
        return cast_floating(tree, self.param_dtype)

    def cast_to_compute(self, tree: Any) -> Any:
        return cast_floating(tree, self.compute_dtype)

    def cast_to_output(self, tree: Any) -> Any:
        return cast_floating(tree, self.output_dtype)

    def cast_to_activation(self, tree: Any) -> Any:
        return cast_floating(tree, self.activations)


def cast_floating(tree: Any, dtype: Any) -> Any:
    """Cast every floating-point leaf of ``tree`` to ``dtype``; integer leaves are unchanged."""

    def cast(x):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating):
            return x.astype(dtype)
        return x

    return jax.tree_util.tree_map(cast, tree)


def mask_value(dtype: Any) -> float:
    """A large negative fill for masked attention logits that is finite in ``dtype``.

    Half of the dtype's most negative finite value, so that adding a bias cannot overflow.
    """
    return float(jnp.finfo(dtype).min) / 2
