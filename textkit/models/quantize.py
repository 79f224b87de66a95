"""Int8 weights for CPU inference: ``quantize_int8(model, params)``.

Every ``Dense`` kernel and ``Embed`` table the model uses becomes int8 with a float32 scale per
output column (kernel, ``kernel_scale``) or per row (table, ``embedding_scale``): symmetric,
``round(w / scale)`` with ``scale = max|w| / 127``. At apply time those layers see the int8
parameter and quantize their input too, one symmetric scale per row (``layers.int8_matmul``),
so the product is an int8 x int8 -> int32 dot: XLA:CPU's fast integer path (an int8 x float or
uint8 x int8 dot falls back to slow loops), rescaled to float32. Everything else (layer norms,
biases, attention products, softmax, LSTM weights) stays as it was. Inference only: there is no
gradient through the rounding.

Which parameters belong to a ``Dense`` or an ``Embed`` is read from the model itself (one
abstract forward pass with ``flax.linen.intercept_methods``), not guessed from names.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.layers import Dense, Embed, symmetric_int8

PyTree = Any


def _layer_paths(model: nn.Module, params: PyTree, *example: jax.Array) -> dict[tuple, Any]:
    """Module path -> the ``Dense``/``Embed`` instance at it, for every one the forward pass
    ``model.apply(params, *example)`` calls."""
    found: dict[tuple, Any] = {}

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, (Dense, Embed)):
            found[tuple(context.module.path)] = context.module
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        jax.eval_shape(lambda p: model.apply({"params": p}, *example), params)
    return found


def quantize_int8(model: nn.Module, params: PyTree, *example: jax.Array) -> PyTree:
    """Copy of ``params`` with every ``Dense`` kernel and ``Embed`` table int8 (module
    docstring). ``example`` are inputs of one forward pass (default: a seq2seq model's
    ``(src_tokens, tgt_input)``, both int32[1, 8] of id 0) that reaches every layer to
    quantize. Already-int8 layers are left as they are."""
    if not example:
        example = (jnp.zeros((1, 8), jnp.int32),) * 2
    out = _mutable(params)                 # new dicts, the same arrays: the input is kept
    for path, module in _layer_paths(model, params, *example).items():
        node = out
        for name in path:
            node = node[name]
        if isinstance(module, Dense) and node["kernel"].dtype != jnp.int8:
            kernel = node["kernel"]
            values, scale = symmetric_int8(kernel, axis=tuple(range(module.contract)))
            node["kernel"], node["kernel_scale"] = values, scale.reshape(kernel.shape[
                module.contract:])
        elif isinstance(module, Embed) and node["embedding"].dtype != jnp.int8:
            values, scale = symmetric_int8(node["embedding"], axis=1)
            node["embedding"], node["embedding_scale"] = values, scale[:, 0]
    return out


def _mutable(tree: PyTree) -> PyTree:
    """Nested dicts (flax FrozenDicts included) as plain dicts, leaves shared."""
    if isinstance(tree, dict) or hasattr(tree, "items"):
        return {key: _mutable(value) for key, value in tree.items()}
    return tree
