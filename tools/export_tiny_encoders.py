"""Export every encoder fixture with textkit (``load_pretrained`` -> ``save_pretrained``), for
``tools/make_tiny_encoders.py --check`` to load with transformers::

    .venv/bin/python tools/export_tiny_encoders.py /tmp/encoder_exports
    /tmp/hfenv/bin/python tools/make_tiny_encoders.py --check /tmp/encoder_exports
"""

from __future__ import annotations

import argparse
from pathlib import Path

from textkit.pretrained import load_pretrained, save_pretrained

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "encoders"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory to write one export per fixture into")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for fixture in sorted(d for d in FIXTURES.iterdir() if (d / "config.json").is_file()):
        pretrained = load_pretrained(fixture)
        model, params, tokenizer = pretrained.model, pretrained.params, pretrained.tokenizer
        save_pretrained(model, params, tokenizer, args.out / fixture.name)
        print(f"{fixture.name} -> {args.out / fixture.name}")


if __name__ == "__main__":
    main()
