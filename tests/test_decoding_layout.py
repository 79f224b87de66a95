"""textkit.decoding knows no model package (and vice versa)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


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

