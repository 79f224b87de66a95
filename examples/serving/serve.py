"""Serve a checkpoint over HTTP with an OpenAI-compatible API, continuous batching and a chat page
at ``/`` (needs ``pip install 'textkit-jax[serve]'``)::

    python examples/serving/serve.py --pretrained DIR --batch-size 8
    curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "Once upon a time", "max_tokens": 32}'

The recipe is ``textkit.cli.serve`` (see its docstring for every flag; docs/serving.md).
"""

import sys

from textkit.cli.serve import main

if __name__ == "__main__":
    sys.exit(main())
