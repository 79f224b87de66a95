"""Generate text from a decoder-only checkpoint (GPT-2, Llama, Mistral, Qwen2/3, Gemma, SmolLM),
streamed to stdout::

    python examples/language_model/generate.py --pretrained DIR --prompt "Once upon a time"
    printf 'a\\nlonger prompt\\n' | python examples/language_model/generate.py --pretrained DIR \\
        --sample --temperature 0.8 --top-p 0.9 --seed 1 --jsonl

The recipe is ``textkit.cli.generate`` (see its docstring for every flag).
"""

import sys

from textkit.cli.generate import main

if __name__ == "__main__":
    sys.exit(main())
