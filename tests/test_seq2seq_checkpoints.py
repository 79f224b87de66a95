"""One shape for an encoder-decoder checkpoint family (``textkit.pretrained.seq2seq``): the
family as data, save dispatched on the config's architecture, tokenizers changed only in
copies, tensors read one at a time (bfloat16 files too, whatever was imported before)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import jax
import numpy as np
import pytest

from textkit.models.transformer import Transformer, TransformerConfig
from textkit.pretrained import load_pretrained, save_pretrained
from textkit.pretrained.errors import UnsupportedArchitectureError
from textkit.pretrained.files import read_tensors
from textkit.pretrained.marian import marian_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MARIAN = FIXTURES / "tiny_marian"


@pytest.fixture(scope="module")
def marian():
    return load_pretrained(MARIAN)


def test_a_loaded_family_names_its_architecture(marian):
    config = marian.model.config
    assert config.architecture == "marian"
    assert (config.pre_norm, config.has_final_norm, config.embedding_norm,
            config.position_offset) == (False, False, False, 0)


def test_save_dispatches_on_the_architecture(marian, tmp_path):
    own = Transformer(TransformerConfig(**{**TransformerConfig.tiny, "src_vocab_size": 200,
                                           "tgt_vocab_size": 200}))
    with pytest.raises(UnsupportedArchitectureError, match="'transformer'.*no Hugging Face"):
        save_pretrained(own, marian.params, (marian.tokenizer, marian.target_tokenizer),
                        tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_tokenizer_settings_change_only_in_copies(marian):
    target = marian.target_tokenizer
    quiet = target.configured(add_eos=False)
    assert target.add_eos and not quiet.add_eos
    assert target.encode(["der hund ."])[0][:-1] == quiet.encode(["der hund ."])[0]
    assert quiet.decoder_start_id == target.decoder_start_id == marian.model.config.pad_id
    assert target.for_languages(None, None) is target
    with pytest.raises(ValueError, match=r"Marian checkpoints take no language codes.*de_DE"):
        target.for_languages("en_XX", "de_DE")


def test_a_bfloat16_checkpoint_loads_whatever_was_imported(tmp_path):
    """The weights stored as bfloat16, loaded in a fresh process that imports textkit's
    loader before anything else: the params are the bfloat16 values widened to float32."""
    copy = tmp_path / "bf16"
    shutil.copytree(MARIAN, copy)
    import ml_dtypes
    from safetensors.numpy import save_file

    tensors = {k: np.asarray(v, np.float32).astype(ml_dtypes.bfloat16)
               for k, v in read_tensors(MARIAN).items()}
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    program = ("import sys\nfrom textkit.pretrained.files import read_tensors\n"
               "from pathlib import Path\n"
               "t = read_tensors(Path(sys.argv[1]))\n"
               "print(sorted({str(v.dtype) for v in t.values()}))\n")
    done = subprocess.run([sys.executable, "-c", program, str(copy)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['bfloat16']"
    loaded = load_pretrained(copy)
    embedding = loaded.params["src_embed"]["embedding"]
    assert embedding.dtype == np.float32
    np.testing.assert_array_equal(embedding, tensors["model.shared.weight"].astype(np.float32))


def test_loading_holds_one_tensor_at_a_time(tmp_path):
    """Peak traced host memory of a load within 1.5x the float32 params."""
    hf = json.loads((MARIAN / "config.json").read_text())
    hf.update(d_model=128, encoder_ffn_dim=512, decoder_ffn_dim=512, vocab_size=12000,
              decoder_vocab_size=12000, encoder_layers=2, decoder_layers=2)
    config = marian_config(hf, share_embeddings=True, tie_output=True)
    model = Transformer(config)
    dummy = np.full((1, 8), config.pad_id, np.int32)
    params = jax.tree_util.tree_map(np.asarray, jax.jit(model.init)(
        jax.random.PRNGKey(0), dummy, dummy)["params"])
    original = load_pretrained(MARIAN)
    save_pretrained(model, params, (original.tokenizer, original.target_tokenizer),
                    tmp_path / "big")
    size = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(params))
    load_pretrained(tmp_path / "big")        # compile and cache what a load traces
    tracemalloc.start()
    try:
        again = load_pretrained(tmp_path / "big")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, params)
    assert peak <= 1.5 * size, f"peak {peak / 2**20:.1f} MiB for {size / 2**20:.1f} MiB"
