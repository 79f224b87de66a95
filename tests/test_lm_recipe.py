"""Language-model recipe: state carried across BPTT windows, lr as optimizer state, end to end."""

import collections
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import subprocesses

from textkit.data import BPTTBatches, toy_lm_corpus
from textkit.models import get_model
from textkit.tasks import language_model as lm
from textkit.tasks.language_model import next_learning_rate, stream_nll, stream_windows
from textkit.training import create_train_state, learning_rate_of, with_learning_rate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "language_model"
PAD, EOS, VOCAB = 1, 3, 40


def load_script(name: str):
    return subprocesses.load_script(EXAMPLES / f"{name}.py", f"lm_{name}")


@pytest.fixture(scope="module")
def tiny_lm():
    model = get_model("lstm_lm_tiny", vocab_size=VOCAB, pad_id=PAD, dropout=0.0)
    params = model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    # scaled up from the U(-0.1, 0.1) init so that the next token depends on the state
    return model, jax.tree.map(lambda x: 10.0 * x, params)


def random_stream(length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(2, VOCAB, size=length).astype(np.int32)


def test_eval_state_carry_equals_whole_sequence(tiny_lm):
    model, params = tiny_lm
    ids = random_stream(61, seed=1)
    eval_step = lm.lm_eval_step(model, excluded_ids=(PAD,))
    carried, count = stream_nll(eval_step, params, stream_windows(ids, 7, EOS, PAD),
                                model.initial_state(1))
    assert count == len(ids)

    # the whole sequence in one call of the model, NLL computed by hand
    inputs = jnp.asarray(np.concatenate([[EOS], ids[:-1]]))[None]              # [1, N]
    logits, _ = model.apply({"params": params}, inputs)                          # [1, N, V]
    log_probs = jax.nn.log_softmax(logits[0].at[:, PAD].set(-jnp.inf), axis=-1)
    whole = -float(jnp.take_along_axis(log_probs, jnp.asarray(ids)[:, None], 1).sum())
    assert carried == pytest.approx(whole, rel=1e-5)

    # resetting the state at every window is measurably different: the carry matters
    reset = 0.0
    for window in stream_windows(ids, 7, EOS, PAD):
        _, metrics = eval_step(params, window, model.initial_state(1))
        reset += float(metrics["loss_sum"])
    assert abs(reset - whole) > 0.01 * whole


def test_train_step_carries_state_through_the_jitted_step(tiny_lm):
    model, params = tiny_lm
    windows = BPTTBatches(random_stream(3 * 23, seed=2), batch_size=3, seq_len=5,
                          last_batch="keep", pad_id=PAD)      # 22 targets/row: last window padded
    optimizer = lm.lm_optimizer("sgd", 0.0, clip_norm=5.0)[0]        # lr 0: params stay put
    state = create_train_state(params, optimizer, jax.random.key(1))
    train_step = lm.lm_train_step(model, optimizer, excluded_ids=(PAD,), donate=False)
    carry = model.initial_state(3)
    for window in windows:
        state, carry, metrics = train_step(state, window, carry)
        assert np.isfinite(float(metrics["loss"]))
    _, whole_state = model.apply({"params": params},
                                 jnp.asarray(windows.rows[:, :windows.num_targets]))
    for (h, c), (h_want, c_want) in zip(carry, whole_state):
        np.testing.assert_allclose(h, h_want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c, c_want, rtol=1e-5, atol=1e-6)


def test_learning_rate_is_optimizer_state(tiny_lm):
    model, params = tiny_lm
    window = BPTTBatches(random_stream(2 * 9, seed=3), 2, 8, pad_id=PAD)[0]
    optimizer = lm.lm_optimizer("sgd", 1.0, clip_norm=None)[0]
    state = create_train_state(params, optimizer, jax.random.key(2))
    train_step = lm.lm_train_step(model, optimizer, donate=False)
    carry = model.initial_state(2)

    full, _, _ = train_step(state, window, carry)
    halved_opt = with_learning_rate(state.opt_state, 0.5)
    assert learning_rate_of(halved_opt) == 0.5 and learning_rate_of(state.opt_state) == 1.0
    # same structure, shapes and dtypes: the jitted step takes it without recompiling
    assert (jax.tree_util.tree_structure(halved_opt)
            == jax.tree_util.tree_structure(state.opt_state))
    assert jax.tree.map(lambda x: (x.shape, x.dtype), halved_opt) == jax.tree.map(
        lambda x: (x.shape, x.dtype), state.opt_state)
    half, _, _ = train_step(state.replace(opt_state=halved_opt), window, carry)
    step_full = jax.tree.map(lambda a, b: a - b, full.params, params)
    step_half = jax.tree.map(lambda a, b: a - b, half.params, params)
    for a, b in zip(jax.tree.leaves(step_full), jax.tree.leaves(step_half)):
        np.testing.assert_allclose(b, 0.5 * a, rtol=1e-4, atol=1e-6)  # f32 rounding

    adam = lm.lm_optimizer("adam", 1e-3, clip_norm=1.0)[0]
    assert learning_rate_of(with_learning_rate(adam.init(params), 2e-4)) == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="learning_rate"):
        learning_rate_of(jax.numpy.zeros(()))


def test_next_learning_rate_schedules():
    plateau = dict(factor=0.25, decay_on="plateau", decay_start=1)
    assert next_learning_rate(20.0, epoch=3, improved=True, **plateau) == 20.0
    assert next_learning_rate(20.0, epoch=3, improved=False, **plateau) == 5.0
    zaremba = dict(factor=0.5, decay_on="epoch", decay_start=4)
    assert next_learning_rate(1.0, epoch=3, improved=True, **zaremba) == 1.0
    assert next_learning_rate(1.0, epoch=4, improved=True, **zaremba) == 0.5
    with pytest.raises(ValueError, match="decay_on"):
        next_learning_rate(1.0, epoch=1, improved=True, factor=0.5, decay_on="cosine")


def toy_unigram_test_perplexity(train_sentences: int, seed: int) -> tuple[float, int]:
    """ML unigram perplexity of the toy test split (with <eos>), computed independently."""
    tokens = {segment: [w for line in toy_lm_corpus(segment, n, seed) for w in line.split()
                        + ["<eos>"]]
              for segment, n in (("train", train_sentences), ("test", train_sentences // 10))}
    counts = collections.Counter(tokens["train"])
    total = sum(counts.values())
    nll = -sum(math.log(counts[w] / total) for w in tokens["test"])
    return math.exp(nll / len(tokens["test"])), len(tokens["test"])


def test_toy_data_is_generated_inside_the_run_folder(tmp_path, monkeypatch):
    """Without --data-dir the toy corpus goes into the run's folder: nothing is left behind in
    the system's temporary folder, however many runs read it."""
    from textkit.training import RunDir

    scratch = tmp_path / "system_tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    task = lm.LanguageModelTask(lm.LanguageModelConfig(toy_sentences=30),
                                RunDir(tmp_path / "run"))
    corpora = {split: task.read_split(split) for split in ("train", "valid", "test")}
    assert list(scratch.iterdir()) == []
    for split, corpus in corpora.items():
        assert corpus.paths == [tmp_path / "run" / "toy_data" / f"{split}.txt"]
        assert len(corpus) == (30 if split == "train" else 3)


@pytest.mark.slow
def test_end_to_end_toy_run_resume_and_sample(tmp_path, capsys):
    train = load_script("train")
    common = ["--model", "lstm_lm_tiny", "--toy-sentences", "3000", "--data-dir",
              str(tmp_path / "data"), "--save-dir", str(tmp_path / "run"), "--optimizer",
              "adam", "--lr", "0.01", "--batch-size", "20", "--bptt", "35", "--seed", "0"]
    first = train.main(common + ["--epochs", "2"])
    summary = train.main(common + ["--epochs", "3", "--resume"])

    unigram, test_tokens = toy_unigram_test_perplexity(3000, seed=0)
    assert summary["unigram_test_ppl"] == pytest.approx(unigram, rel=1e-6)
    assert summary["test_tokens"] == test_tokens
    assert summary["test_ppl"] < 0.5 * unigram          # the LM learned the grammar
    assert summary["test_ppl"] < first["test_ppl"]     # the resumed epoch went on improving
    assert [h["epoch"] for h in summary["history"]] == [1, 2, 3]
    assert summary["history"][:2] == first["history"]   # epochs 1-2 restored, not rerun
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("task", "config", "valid_ppl", "test_ppl", "wall_s", "tokens_per_s", "history"):
        assert key in written
    assert written["test_ppl"] == pytest.approx(summary["test_ppl"])
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resumed from epoch 2" in log and f"/ {test_tokens:,} test tokens" in log

    sample = load_script("sample")
    argv = ["--checkpoint", str(tmp_path / "run"), "--prompt", "the dog", "--length", "12",
            "--seed", "3", "--num-samples", "2", "--top-k", "20", "--temperature", "0.8"]
    texts = sample.main(argv)
    assert texts == sample.main(argv)                     # same seed, same text
    assert len(texts) == 2 and texts[0] != texts[1]
    vocab_words = set(json.loads((tmp_path / "run" / "vocab.json").read_text())["idx_to_token"])
    for text in texts:
        assert text.startswith("the dog")
        words = text.split()
        assert len(words) - 2 + text.count("\n") == 12    # 12 tokens; each <eos> a line break
        assert set(words) <= vocab_words and "<pad>" not in words
    assert "--- sample 1" in capsys.readouterr().out


@pytest.mark.parametrize("length,seq_len,stride", [(1, 4, 2), (10, 4, 4), (23, 8, 3), (64, 8, 8)])
def test_sliding_windows_score_every_token_once(length, seq_len, stride):
    ids = random_stream(length, seed=length)
    windows = lm.sliding_windows(ids, seq_len, stride, EOS, PAD)
    scored = np.concatenate([w["targets"][0][w["mask"][0] > 0] for w in windows])
    np.testing.assert_array_equal(scored, ids)                  # each once, in order
    for w in windows:
        np.testing.assert_array_equal(w["inputs"][0, 1:], w["targets"][0, :-1])
        assert w["inputs"].shape == (1, seq_len) and w["inputs"].dtype == np.int32


@pytest.mark.slow
def test_sliding_window_evaluation_of_a_transformer_lm():
    model = get_model("transformer_lm_tiny", vocab_size=VOCAB, pad_id=PAD, dropout=0.0)
    params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    ids = random_stream(50, seed=4)
    eval_step = lm.lm_eval_step(model, excluded_ids=(PAD,))
    disjoint = stream_nll(eval_step, params, stream_windows(ids, 8, EOS, PAD), None, reset=True)
    same = stream_nll(eval_step, params, lm.sliding_windows(ids, 8, 8, EOS, PAD), None,
                      reset=True)
    strided = stream_nll(eval_step, params, lm.sliding_windows(ids, 8, 2, EOS, PAD), None,
                         reset=True)
    assert same == pytest.approx(disjoint, rel=1e-6) and same[1] == strided[1] == 50
    assert strided[0] != pytest.approx(same[0], rel=1e-4)      # more context, other numbers
