"""Write textkit LoRA adapters over the bases of ``tests/fixtures/peft``, for
``tools/make_peft_adapters.py --check`` to load with peft::

    .venv/bin/python tools/export_lora_adapters.py /tmp/lora_exports
    /tmp/hfenv/bin/python tools/make_peft_adapters.py --check /tmp/lora_exports

For each fixture: the base checkpoint its ``adapter_config.json`` names, a textkit adapter
(``pretrained.lora_sites.lora_for``: the family's default targets, or every projection for Llama
(with ``lm_head`` and the embeddings) and GPT-2; rank 2, rsLoRA for Llama) with every weight
redrawn (A and B normal, std 0.2, so the adapter changes the outputs) and the task head
changed, written as ``<name>/adapter`` (``save_adapter``), the merged model as
``<name>/merged`` (``save_pretrained``) and
``<name>/textkit.npz``: the fixture's inputs and textkit's outputs with the adapter merged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from textkit.adapters import Adapter
from textkit.pretrained import load_pretrained, save_pretrained
from textkit.pretrained.lora_sites import lora_for
from textkit.pretrained.peft import save_adapter

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "peft"
SETTINGS = {
    "llama": dict(targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                           "down_proj", "lm_head", "embed_tokens"), rslora=True),
    "gpt2": dict(targets=("c_attn", "c_proj", "c_fc")),
}


def outputs(loaded, params, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs of a fixture's inputs: ``logits`` (QA: ``start_logits`` and
    ``end_logits``), float32 numpy."""
    ids = jnp.asarray(arrays["input_ids"], jnp.int32)
    mask = jnp.asarray(arrays["attention_mask"], jnp.int32)
    apply = loaded.model.apply
    if loaded.kind == "causal_lm":
        return {"logits": np.asarray(apply({"params": params}, ids, mask.astype(bool)))}
    if loaded.kind == "translation":
        decoder = jnp.asarray(arrays["decoder_input_ids"], jnp.int32)
        return {"logits": np.asarray(apply({"params": params}, ids, decoder))}
    out = apply({"params": params}, input_ids=ids, attention_mask=mask)
    keys = ("start_logits", "end_logits") if "start_logits" in out else ("logits",)
    return {k: np.asarray(out[k]) for k in keys}


def export(name: str, out: Path) -> None:
    settings = json.loads((FIXTURES / name / "adapter_config.json").read_text())
    loaded = load_pretrained(ROOT / settings["base_model_name_or_path"])
    lora = lora_for(loaded.model, loaded.params, rank=2, alpha=4.0,
                    **SETTINGS.get(name, {}))
    rng = np.random.default_rng(len(name))
    weights = jax.tree_util.tree_map(
        lambda w: jnp.asarray(rng.normal(0, 0.2, w.shape), jnp.float32),
        lora.init(jax.random.PRNGKey(0)))
    params = {k: (jax.tree_util.tree_map(lambda w: w + rng.normal(0, 0.2, w.shape), v)
                  if k in lora.heads else v) for k, v in loaded.params.items()}
    adapter = Adapter(lora, weights)
    save_adapter(loaded.model, adapter, params, out / name / "adapter",
                 base_model=settings["base_model_name_or_path"])
    merged = jax.tree_util.tree_map(np.asarray, adapter.merge(params))
    tokenizers = loaded.tokenizer if loaded.target_tokenizer is None else (
        loaded.tokenizer, loaded.target_tokenizer)
    options = {"generation": loaded.generation} if loaded.kind != "encoder" else {}
    save_pretrained(loaded.model, merged, tokenizers, out / name / "merged", **options)
    with np.load(FIXTURES / name / "reference.npz") as data:
        inputs = {k: data[k] for k in data.files if k.endswith("_ids") or k == "attention_mask"}
    np.savez(out / name / "textkit.npz", **inputs, **outputs(loaded, merged, inputs))
    print(f"{name}: {len(lora.sites)} sites, heads {list(lora.heads)} -> {out / name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory to write one export per fixture into")
    args = p.parse_args()
    for fixture in sorted(d for d in FIXTURES.iterdir() if (d / "adapter_config.json").is_file()):
        export(fixture.name, args.out)


if __name__ == "__main__":
    main()
