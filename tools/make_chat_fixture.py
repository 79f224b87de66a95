"""Build ``tests/fixtures/decoders/qwen2_chat``: the tiny ``qwen2`` fixture with Qwen2.5-Instruct's
chat template (ChatML) and 512 positions, so the chat paths (``Generator.chat``, the server's
chat endpoint and page) have a checkpoint with a template to render conversations through.

Needs only the standard library; run it from the repository root and commit what it writes::

    python3 tools/make_chat_fixture.py [--shared ../shared] [--out tests/fixtures/decoders]

The template is ``chat_template`` of ``<shared>/data/tokenizers/qwen2.5/tokenizer_config.json``
(Qwen2.5-0.5B-Instruct's, Apache-2.0; provenance in that folder's SOURCE.md), written as
``chat_template.jinja``. The tiny tokenizer has none of ChatML's special tokens: ``<|im_start|>``
and ``<|im_end|>`` are encoded as ordinary bytes, which is enough to exercise the rendering.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

FILES = ("generation_config.json", "model.safetensors", "tokenizer.json",
           "tokenizer_config.json")
POSITIONS = 512
"""The fixture's ``max_position_embeddings`` (qwen2's 128 is shorter than a rendered conversation
of bytes; rotary positions have no weights, so only config.json changes)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=Path("../shared"))
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/decoders"))
    args = parser.parse_args()
    source = args.out / "qwen2"
    target = args.out / "qwen2_chat"
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, target / name)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config["max_position_embeddings"] = POSITIONS
    (target / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    settings = args.shared / "data" / "tokenizers" / "qwen2.5" / "tokenizer_config.json"
    template = json.loads(settings.read_text(encoding="utf-8"))["chat_template"]
    (target / "chat_template.jinja").write_text(template, encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
