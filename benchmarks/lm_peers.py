"""transformers' ``generate`` and CTranslate2's ``Generator`` timed in their own process, for
``benchmarks/generate.py``.

torch, CTranslate2 and JAX each keep a thread pool sized to the machine; in one process they
compete, so ``generate.py`` starts this worker (a Python with torch, transformers and
ctranslate2: ``--peer-python``) and alternates rounds with it over stdin / stdout, one JSON
object per line:

    -> {"make": {"kind": "gpt2" | "smollm2", "dir": DIR, "tokenizer": DIR}}
    <- {"made": DIR}  (a random-weight checkpoint in transformers' layout, tokenizer files beside)
    -> {"load": DIR}
    <- {"ready": true, "torch": ..., "transformers": ..., "ctranslate2": ..., "threads": T}
    -> {"engine": "hf" | "ct2", "mode": "greedy" | "top_p", "int8": bool,
        "prompts": [[ids]], "new_tokens": N}
    <- {"s": seconds of one generate call over all the prompts}
    -> {"quit": true}

Every call generates exactly ``new_tokens`` tokens per prompt (``min_new_tokens`` /
``min_length`` = the maximum); top-p sampling is ``top_k`` 50, ``top_p`` 0.9 on every engine.
transformers runs float32 under ``torch.no_grad`` (its int8 is not measured: transformers has no
CPU int8 ``generate`` path without extra packages); CTranslate2 runs ``float32`` and ``int8``
compute types converted from the same directory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {
    # GPT-2 small (124M)
    "gpt2": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
             "n_head": 12, "n_positions": 1024, "bos_token_id": 50256,
             "eos_token_id": 50256},
    # SmolLM2-135M's configuration
    "smollm2": {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
                "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "max_position_embeddings": 8192,
                "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
                "bos_token_id": 0, "eos_token_id": 0},
}


def reply(message: dict) -> None:
    print(json.dumps(message), flush=True)


def make(kind: str, directory: str, tokenizer: str) -> None:
    """A random-weight checkpoint of ``kind`` with the real tokenizer files of ``tokenizer``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    spec = dict(SHAPES[kind])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(directory)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(Path(tokenizer) / name, Path(directory) / name)
    (Path(directory) / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>" if kind == "gpt2"
         else "<|im_start|>", "eos_token": "<|endoftext|>", "add_bos_token": False}))


class Peers:
    """transformers and CTranslate2 (float32 and int8) on one checkpoint directory."""

    def __init__(self, directory: str):
        import ctranslate2
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        self.threads = os.cpu_count() or 1
        torch.set_num_threads(self.threads)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(directory,
                                                          dtype=torch.float32).eval()
        self.vocab = {i: t for t, i in json.loads(
            (Path(directory) / "vocab.json").read_text("utf-8")).items()}
        self.work = tempfile.mkdtemp()
        self.ct2 = {}
        for int8 in (False, True):
            out = os.path.join(self.work, "int8" if int8 else "float32")
            converter = ctranslate2.converters.TransformersConverter(directory)
            converter.convert(out, quantization="int8" if int8 else None, force=True)
            self.ct2[int8] = ctranslate2.Generator(
                out, device="cpu", compute_type="int8" if int8 else "float32",
                intra_threads=self.threads, inter_threads=1)
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "ctranslate2": ctranslate2.__version__, "threads": self.threads}

    def hf(self, mode: str, prompts: list[list[int]], new_tokens: int) -> float:
        torch = self.torch
        width = max(map(len, prompts))
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(prompts):
            ids[i, width - len(row):], mask[i, width - len(row):] = torch.tensor(row), 1
        sampling = {"do_sample": True, "top_k": 50, "top_p": 0.9} if mode == "top_p" else {
            "do_sample": False}
        start = time.perf_counter()
        with torch.no_grad():
            self.model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, pad_token_id=0, **sampling)
        return time.perf_counter() - start

    def ct(self, mode: str, int8: bool, prompts: list[list[int]], new_tokens: int) -> float:
        tokens = [[self.vocab[i] for i in row] for row in prompts]
        sampling = {"sampling_topk": 50, "sampling_topp": 0.9} if mode == "top_p" else {
            "sampling_topk": 1}
        start = time.perf_counter()
        self.ct2[int8].generate_batch(tokens, max_length=new_tokens, min_length=new_tokens,
                                      include_prompt_in_result=False, **sampling)
        return time.perf_counter() - start


def main() -> None:
    peers = None
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if "make" in message:
                spec = message["make"]
                make(spec["kind"], spec["dir"], spec["tokenizer"])
                reply({"made": spec["dir"]})
            elif "load" in message:
                peers = Peers(message["load"])
                reply({"ready": True, **peers.versions})
            elif "engine" in message:
                if message["engine"] == "hf":
                    seconds = peers.hf(message["mode"], message["prompts"],
                                       message["new_tokens"])
                else:
                    seconds = peers.ct(message["mode"], message["int8"], message["prompts"],
                                       message["new_tokens"])
                reply({"s": seconds})
            elif message.get("quit"):
                return
        except ImportError as error:
            reply({"error": f"{error} (in {sys.executable})"})
            return


if __name__ == "__main__":
    main()
