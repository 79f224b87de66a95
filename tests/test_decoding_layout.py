"""textkit.decoding knows no model package (and vice versa); the old textkit.models paths of the
decoding names still work for one release, with a DeprecationWarning."""

from __future__ import annotations

import subprocess
import sys
import textwrap

OLD_NAMES = ("DecodeOutput", "Translator", "beam_search", "greedy_search", "length_penalty",
             "model_step_fn", "prefill", "sample")
OLD_MODULES = {"beam_search": "beam_search", "sampling": "greedy_search",
               "decoding": "model_step_fn", "translator": "Translator"}


def _run(code: str) -> None:
    """Run ``code`` in a fresh interpreter (imports and warnings start from nothing)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_packages_do_not_import_each_other():
    _run("""
        import sys
        import textkit.decoding
        assert not [m for m in sys.modules if m.startswith("textkit.models")], sys.modules
    """)
    _run("""
        import sys
        import textkit.models
        assert not [m for m in sys.modules if m.startswith("textkit.decoding")], sys.modules
    """)


def test_old_import_paths_warn_and_give_the_new_objects():
    _run(f"""
        import importlib
        import warnings

        import textkit.decoding as new
        import textkit.models as models

        for name in {OLD_NAMES!r}:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = getattr(models, name)
            assert value is getattr(new, name), name
            assert [w.category for w in caught] == [DeprecationWarning], name
            assert "textkit.decoding" in str(caught[0].message)
        for module, name in {OLD_MODULES!r}.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                old = importlib.import_module("textkit.models." + module)
            assert getattr(old, name) is getattr(new, name), module
            assert DeprecationWarning in [w.category for w in caught], module
        # The imported beam_search submodule now shadows the function: it still calls through.
        import jax.numpy as jnp
        from textkit.models import beam_search

        def step(params, cache, tokens):
            return jnp.log(jnp.full((tokens.shape[0], 4), 0.25)), cache

        out = beam_search(step, None, {{"row": jnp.zeros(2)}}, 2, beam_size=2, max_length=3,
                          eos_id=1)
        assert out.tokens.shape == (2, 1, 3)
    """)
