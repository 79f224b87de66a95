"""Train a translation model (Transformer or GNMT) and report sacreBLEU on the test set.

With no arguments it trains a tiny Transformer on the built-in toy corpus in a few minutes:

    python examples/nmt/train.py
    python examples/nmt/train.py --dataset multi30k --data-dir ../shared/data/multi30k-en-de \\
        --model transformer_small --save-dir runs/m30k

Pipeline: SentencePiece model(s) trained on the train split (cached in --save-dir), the split
streamed from its files and encoded once into a memory-mapped token store (``store/``, rebuilt
when a file or the tokenizer changes), bucketed token-budget batches with a few fixed shapes
(``--accum-steps`` micro-batches per update), the jit-compiled train step, validation BLEU with
beam search every --eval-every steps, Orbax checkpoints (latest N and best), averaging of the
last N, then cased and lowercased test BLEU with sacreBLEU signatures. ``--resume`` continues
from the latest checkpoint (parameters, optimizer, data position). Outputs under --save-dir:
``config.json``, ``spm*.model``, ``store/``, ``checkpoints/``, ``final/`` (evaluated params),
``summary.json``; with ``--init-from DIR`` (a Marian / OPUS-MT or BART checkpoint, fine-tuned
with its own tokenizers) also ``export/``, the evaluated parameters written with
``save_pretrained`` in the checkpoint's own layout (transformers loads it; ``--no-export``
skips it).

The same command runs on one device, on all local devices (data parallel over a ``data`` mesh
axis) and as several processes (``--coordinator``/``--num-processes``/``--process-id`` or the
environment, see docs/distributed.md). ``--batch-tokens`` is the global budget and every bucket's
global rows are rounded down to a multiple of ``--batch-rows-multiple``, so the global batches
are the same for every layout whose device count divides that multiple.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from textkit import parallel
from textkit.cli import parse_config, run_main
from textkit.tasks.lora import LORA_ADDED, with_lora
from textkit.tasks.translation import TranslationConfig, TranslationTask, choose_final
from textkit.training import (
    RunDir,
    create_train_state,
    ema_params_of,
    fit,
    launch,
    run_writers,
)

# settings that must not change when a run is resumed (data, vocabulary, model, data order)
RESUME_KEYS = ("dataset", "src_lang", "tgt_lang", "src_lang_code", "tgt_lang_code", "toy_sizes",
               "spm_vocab_size", "spm_model_type", "joint_spm", "max_length", "model",
               "model_overrides", "init_from", "precision", "batch_tokens", "num_buckets",
               "batch_rows_multiple", "accum_steps", "seed", "lora")
# settings added after older run directories were written, with the value those runs had
ADDED_SINCE = {"accum_steps": 1, "src_lang_code": None, "tgt_lang_code": None, **LORA_ADDED}


def report(run: RunDir, summary: dict[str, Any], test: dict[str, Any]) -> None:
    """The closing lines: compiles, the two sacreBLEU scores with signatures, a summary."""
    config = summary["config"]
    run.log(f"compiled {summary['num_compiles']} train-step program(s) for "
            f"{summary['num_bucket_shapes']} bucket shapes; {summary['num_decode_shapes']} "
            f"decode shapes\ntest BLEU {test['bleu']:.2f}  {test['signature']}\n"
            f"test BLEU {test['bleu_lowercase']:.2f}  {test['signature_lowercase']}\n"
            f"{config['model']} on {config['dataset']}: {summary['steps']} steps, "
            f"{summary['num_params']:,} params, {summary['tokens_per_s']:.0f} train tokens/s "
            f"(compiling {summary['compile_s']:.0f}s apart), "
            f"test BLEU {test['bleu']:.2f} (lowercase {test['bleu_lowercase']:.2f}), "
            f"{summary['wall_s']:.0f}s -> {run.root}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    config = parse_config(TranslationConfig, argv, __doc__.splitlines()[0])
    run, mesh = launch(config.save_dir, config.record(), resume=config.fit.resume,
                       runs_folder=config.runs_folder, processes=config.launch,
                       check=RESUME_KEYS, added=ADDED_SINCE)
    task = with_lora(TranslationTask(config, run))      # refuses a --max-length too long
    data = {split: task.read_split(split) for split in task.splits}   # train: streamed
    task.prepare(data)
    loader = task.make_loader(data["train"], train=True)
    model = task.build_model()
    run.log(f"{config.dataset} {config.src_lang}->{config.tgt_lang}: "
            f"{len(loader.dataset)} train pairs (of {len(data['train'])}), "
            f"{len(data['valid'])} valid, {len(data['test'])} test; vocab "
            f"{len(task.src_tokenizer)}/{len(task.tgt_tokenizer)}; {len(loader)} batches per "
            f"epoch; {jax.device_count()} device(s) in {jax.process_count()} process(es)\n"
            f"{loader.batch_sampler.stats()}")
    fit_config = config.fit
    optimizer, learning_rate = task.optimizer(
        fit_config.max_steps or fit_config.epochs * len(loader))
    init_key, train_key = jax.random.split(jax.random.PRNGKey(config.seed))
    state = parallel.replicate(create_train_state(task.init_params(model, init_key), optimizer,
                                                  train_key, frozen=task.frozen_params()), mesh)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    train_step = task.make_train_step(model, optimizer,
                                      **parallel.train_step_shardings(mesh, state))
    manager = run.checkpoint_manager(max_to_keep=max(config.average_last, 1),
                                     best_metric="valid_bleu")
    result = fit(
        state, train_step, loader, fit_config, checkpoints=manager,
        evaluate=lambda state: {"valid_bleu": task.evaluate(
            model, ema_params_of(state), data["valid"])["bleu"]},
        place=lambda state: parallel.replicate(state, mesh),
        to_device=lambda batch: parallel.global_batch(batch, mesh),
        count_tokens=task.count_tokens, log=run.log, learning_rate=learning_rate,
        writers=run_writers(run.root, tensorboard=config.tensorboard,
                            main_process=run.main_process), desc=config.model)
    source, params, valid_bleu = choose_final(
        manager, result.state, config.average_last,
        lambda params: task.evaluate(model, params, data["valid"])["bleu"], run.log)
    run.save_final(result.progress.step, params, source)  # every process: a collective save
    test = task.score(model, params, data["test"])
    run.write_text("test.hyp", "".join(h + "\n" for h in test["hypotheses"]))
    export = None
    if config.exports and run.main_process:
        export = str(task.export(model, params, run.root / "export"))
        run.log(f"exported with save_pretrained to {export}")
    summary = run.summary("translation", config.record(), result, num_params=num_params,
                          results={
        "export": export,
        "evaluated": source, "valid_bleu": valid_bleu, "test_bleu": test["bleu"],
        "signature": test["signature"], "test_bleu_lowercase": test["bleu_lowercase"],
        "signature_lowercase": test["signature_lowercase"],
        "num_bucket_shapes": len(loader.batch_sampler.bucket_shapes),
        "num_decode_shapes": len(task.translator(model).compiled_shapes)})
    report(run, summary, test)
    return summary


if __name__ == "__main__":
    run_main(main)
