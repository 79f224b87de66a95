"""Write PEFT LoRA adapters over the tiny fixtures, with peft's reference logits, into
``tests/fixtures/peft``; ``--check DIR`` loads textkit's exports with peft and compares.

Needs torch 2.13.0, transformers 5.x and peft 0.21.2 (not textkit's dependencies); run it by
hand in the peers' environment and commit what it writes::

    /tmp/hfenv/bin/pip install torch==2.13.0 transformers peft==0.21.2 safetensors numpy
    /tmp/hfenv/bin/python tools/make_peft_adapters.py [--out tests/fixtures/peft]

    # textkit's exports (textkit's environment), then the check with peft:
    .venv/bin/python tools/export_lora_adapters.py /tmp/lora_exports
    /tmp/hfenv/bin/python tools/make_peft_adapters.py --check /tmp/lora_exports

Each fixture directory holds ``adapter_config.json`` + ``adapter_model.safetensors`` as
``PeftModel.save_pretrained`` writes them, over the base named in ``FIXTURES`` (a directory of
``tests/fixtures``), and ``reference.npz``: the inputs (``input_ids``, ``attention_mask``; the
translation model's ``decoder_input_ids``) and peft's float32 outputs (``logits``; QA:
``start_logits``, ``end_logits``). A new adapter's B is zero, so every LoRA and saved-module
tensor is redrawn (normal, std 0.2, seeded) before saving: the outputs then differ from the
base model's. The settings cover rsLoRA, GPT-2's ``fan_in_fan_out``, every fused slice of
Llama (q/k/v, gate/up), its ``lm_head`` and its (untied) embeddings, a regular-expression
``target_modules`` and each task head's ``modules_to_save``. peft keeps ``target_modules`` as
a set; the file lists them sorted, so that the fixtures do not change from run to run.

``--check DIR``: every ``DIR/<name>/`` that ``tools/export_lora_adapters.py`` wrote holds
``adapter/`` (textkit's PEFT export), ``merged/`` (textkit's merged checkpoint) and
``textkit.npz`` (inputs and textkit's outputs). Each adapter is loaded with
``PeftModel.from_pretrained`` over its base and each merged checkpoint with transformers alone;
both must give textkit's outputs within 1e-5 of the outputs' scale (float32; at least 1e-5).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
VERSIONS = {"torch": "2.13.0", "peft": "0.21.2"}
CLASSES = {"CAUSAL_LM": AutoModelForCausalLM, "SEQ_CLS": AutoModelForSequenceClassification,
           "TOKEN_CLS": AutoModelForTokenClassification,
           "QUESTION_ANS": AutoModelForQuestionAnswering, "SEQ_2_SEQ_LM": AutoModelForSeq2SeqLM}
FIXTURES = {
    "gpt2": ("decoders/gpt2", dict(task_type="CAUSAL_LM", r=4, lora_alpha=8,
                                   target_modules=["c_attn", "c_fc"], fan_in_fan_out=True)),
    "llama": ("decoders/llama", dict(task_type="CAUSAL_LM", r=2, lora_alpha=4, use_rslora=True,
                                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                     "gate_proj", "up_proj", "down_proj",
                                                     "lm_head", "embed_tokens"])),
    "qwen3": ("decoders/qwen3", dict(task_type="CAUSAL_LM", r=4, lora_alpha=16,
                                     lora_dropout=0.1)),
    "roberta_seqcls": ("encoders/roberta_seqcls", dict(task_type="SEQ_CLS", r=4, lora_alpha=8)),
    "distilbert_tokcls": ("encoders/distilbert_tokcls",
                          dict(task_type="TOKEN_CLS", r=2, lora_alpha=4,
                               target_modules=["q_lin", "v_lin", "lin1"],
                               modules_to_save=["classifier"])),
    "deberta_v3_seqcls": ("encoders/deberta_v3_seqcls",
                          dict(task_type="SEQ_CLS", r=4, lora_alpha=8,
                               target_modules=["query_proj", "value_proj"],
                               modules_to_save=["classifier", "pooler"])),
    "modernbert_qa": ("encoders/modernbert_qa",
                      dict(task_type="QUESTION_ANS", r=2, lora_alpha=2,
                           target_modules=r".*\.attn\.(Wqkv|Wo)",
                           modules_to_save=["head", "classifier"])),
    "marian": ("tiny_marian", dict(task_type="SEQ_2_SEQ_LM", r=4, lora_alpha=8,
                                   target_modules=["q_proj", "v_proj", "fc1"])),
}


def inputs(name: str, base: torch.nn.Module) -> dict[str, np.ndarray]:
    """Two rows of random ids (the encoders' second row right-padded; no pad id drawn)."""
    config = base.config
    rng = np.random.default_rng(len(name))
    pad = config.pad_token_id if config.pad_token_id is not None else -1
    vocab = config.vocab_size
    ids = rng.integers(3, min(vocab, 300), (2, 8))
    ids[ids == pad] = 3 if pad != 3 else 4
    out = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((2, 8), np.int64)}
    if name.startswith(("roberta", "distilbert", "deberta", "modernbert")):
        out["attention_mask"][1, 5:] = 0
        out["input_ids"][1, 5:] = pad
    if name == "marian":
        tgt = rng.integers(3, min(vocab, 300), (2, 6))
        tgt[tgt == pad] = 3
        tgt[:, 0] = config.decoder_start_token_id
        out["decoder_input_ids"] = tgt.astype(np.int64)
    return out


def outputs(model: torch.nn.Module, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's float32 outputs of ``batch`` (``logits``; QA: start/end logits)."""
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in batch.items()})
    keys = ("start_logits", "end_logits") if "start_logits" in out else ("logits",)
    return {k: out[k].float().numpy() for k in keys}


def base_model(base: str, task_type: str) -> torch.nn.Module:
    return CLASSES[task_type].from_pretrained(ROOT / base, attn_implementation="eager").eval()


def make(out: Path) -> None:
    torch.manual_seed(0)
    for name, (base, settings) in FIXTURES.items():
        model = get_peft_model(base_model(base, settings["task_type"]), LoraConfig(**settings))
        generator = torch.Generator().manual_seed(len(name))
        with torch.no_grad():
            for key, tensor in model.named_parameters():
                if "lora_" in key or "modules_to_save" in key:
                    tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.2)
        model.eval()
        directory = out / name
        model.save_pretrained(directory)
        (directory / "README.md").unlink()         # peft's model card: not a fixture
        settings_file = directory / "adapter_config.json"
        written = json.loads(settings_file.read_text())
        written["base_model_name_or_path"] = f"tests/fixtures/{base}"
        if isinstance(written["target_modules"], list):
            written["target_modules"] = sorted(written["target_modules"])
        settings_file.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
        batch = inputs(name, model.base_model.model)
        np.savez(directory / "reference.npz", **batch, **outputs(model, batch))
        print(f"{name}: {directory}")


def check(exports: Path) -> int:
    worst, failed = 0.0, 0
    for directory in sorted(d for d in exports.iterdir() if (d / "textkit.npz").is_file()):
        base, settings = FIXTURES[directory.name]
        with np.load(directory / "textkit.npz") as data:
            arrays = dict(data)
        batch = {k: arrays.pop(k).astype(np.int64) for k in list(arrays)
                 if k.endswith("_ids") or k == "attention_mask"}
        peft = PeftModel.from_pretrained(base_model(base, settings["task_type"]),
                                         directory / "adapter").eval()
        merged = CLASSES[settings["task_type"]].from_pretrained(
            directory / "merged", attn_implementation="eager").eval()
        for what, model in (("adapter", peft), ("merged", merged)):
            got = outputs(model, batch)
            mask = batch["attention_mask"].astype(bool)
            for key, want in arrays.items():
                diff = np.abs(got[key] - want)
                if diff.ndim >= 2 and diff.shape[:2] == mask.shape and "decoder_input_ids" \
                        not in batch:
                    diff = diff[mask]
                # float32 rounding grows with the logits' size: 1e-5 of their scale (at
                # least 1e-5), as transformers' own float32 and float64 logits differ
                scale = max(1.0, float(np.abs(want).max()))
                error = float(diff.max())
                worst = max(worst, error / scale)
                ok = error <= 1e-5 * scale
                failed += not ok
                print(f"{directory.name} {what} {key}: max |peft - textkit| = {error:.2e} "
                      f"(logits up to {scale:.3g}) {'ok' if ok else 'FAIL'}")
    print(f"worst {worst:.2e} of the logits' scale; {failed} failure(s)")
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "peft")
    p.add_argument("--check", type=Path, help="a directory of tools/export_lora_adapters.py")
    args = p.parse_args()
    import peft

    for package, version in (("torch", torch.__version__), ("peft", peft.__version__)):
        if not version.startswith(VERSIONS[package]):
            print(f"warning: {package} {version}, the fixtures were made with "
                  f"{VERSIONS[package]}", file=sys.stderr)
    if args.check:
        return check(args.check)
    make(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
