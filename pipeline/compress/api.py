"""Python API in the shape of PaddleNLP's ``CompressionArguments`` + ``Trainer.compress()``, working on
the pinned Paddle.  A thin layer over the functions the ``compress`` stage uses
(``pipeline.compress.build``, ``pipeline.compress.candidates``)::

    import pipeline
    from pipeline.compress.api import compress, parse_args

    args, rest = parse_args()          # --strategy dynabert+ptq --width_mult_list 3/4 --algo_list mse KL ...
    result = compress(model=model_or_dir, tokenizer=tokenizer_or_dir, train_dataset=train, eval_dataset=dev,
                      args=args, output_dir=args.output_dir)
    print(result.selection.message)

Datasets are sequences of ``pipeline.data.Example`` (or mappings with ``text_a``/``text_b``/``label``).
``custom_evaluate(model, dataloader) -> float`` replaces the built-in dev accuracy: ``model`` is the
candidate's Paddle Inference session (``.run(input_ids, token_type_ids) -> logits``; every candidate
is a static model), ``dataloader`` a ``paddle.io.DataLoader`` over ``eval_dataset`` with
``data_collator``.  ``custom_calc_loss`` and a non-cross-entropy ``criterion`` are refused for now:
the DynaBERT and QAT training loops have no loss hook yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pipeline.compress.arguments import CompressConfig
from pipeline.compress.candidates import Candidate, Selection, select, selected_candidate, write_table
from pipeline.data import Example
from pipeline.errors import ConfigError, DataError
from pipeline.tokenizer import Tokenizer


@dataclass
class CompressionArguments(CompressConfig):
    # Trainer.compress() makes Paddle models, and custom_evaluate receives a Paddle Inference session.
    candidate_format: str = "paddle"
    eval_batch_size: int = 64  # no validate stage here whose batches to share
    output_dir: str = "compress_output"
    max_seq_length: int = 128
    max_accuracy_drop: float = 0.5  # points below the FP32 model that a candidate may lose

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 8 <= self.max_seq_length <= 512:
            raise ConfigError(f"--max_seq_length must be in [8, 512], got {self.max_seq_length}")
        if self.max_accuracy_drop < 0:
            raise ConfigError(f"--max_accuracy_drop must be >= 0, got {self.max_accuracy_drop}")


@dataclass(frozen=True)
class CompressResult:
    candidates: list[Candidate]
    selection: Selection
    output_dir: Path


def build_parser() -> argparse.ArgumentParser:
    """``--<field>`` for every ``CompressionArguments`` field (lists take several values)."""
    parser = argparse.ArgumentParser(description="ERNIE compression (PaddleNLP CompressionArguments names)", allow_abbrev=False)
    hints = typing.get_type_hints(CompressionArguments)
    for f in dataclasses.fields(CompressionArguments):
        tp = hints[f.name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        origin = typing.get_origin(tp)
        if origin is list:
            item = typing.get_args(tp)[0]
            parser.add_argument(f"--{f.name}", nargs="+", type=int if item is int else str, default=default)
        elif tp is bool:
            parser.add_argument(f"--{f.name}", type=_bool, default=default, metavar="{true,false}")
        elif tp in (int, float):
            parser.add_argument(f"--{f.name}", type=tp, default=default)
        else:
            parser.add_argument(f"--{f.name}", type=str, default=default)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[CompressionArguments, list[str]]:
    """Parse the compression flags; flags it does not know are returned for the caller's own parser."""
    ns, rest = build_parser().parse_known_args(argv)
    return CompressionArguments(**vars(ns)), rest


def _check_hooks(args: CompressionArguments, criterion, custom_calc_loss, custom_evaluate, data_collator) -> None:
    """The Trainer-style hooks this API takes, and what it does not support yet (ConfigError, one line)."""
    if custom_calc_loss is not None and ({"dynabert", "qat"} & set(args.parts())):
        raise ConfigError("custom_calc_loss: not supported yet by the dynabert/qat training loops (they use cross-entropy/distillation)")
    if criterion is not None and type(criterion).__name__ != "CrossEntropyLoss":
        raise ConfigError(f"criterion: only cross-entropy is supported, got {type(criterion).__name__}")
    if custom_evaluate is not None and data_collator is None:
        raise ConfigError("custom_evaluate needs data_collator (to build its dataloader over eval_dataset)")


def compress(
    *,
    model: Any,
    tokenizer: Any,
    train_dataset: Sequence[Any],
    eval_dataset: Sequence[Any],
    args: CompressionArguments,
    output_dir: str | Path | None = None,
    data_collator: Callable | None = None,
    criterion: Any = None,
    custom_evaluate: Callable[[Any, Any], float] | None = None,
    custom_calc_loss: Callable | None = None,
    labels: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> CompressResult:
    """Run ``args.strategy`` on ``model`` and choose the fastest candidate within ``args.max_accuracy_drop``.

    ``model``: a PaddleNLP ERNIE classifier (dygraph) or its directory; ``tokenizer``: a
    ``pipeline.tokenizer.Tokenizer`` or a directory with ``vocab.txt``.  With
    ``args.input_infer_model_path`` the static model there is compressed instead (ptq/embeddings).
    Writes candidates.json, candidates.md, selected.json and candidates/<name>/infer under ``output_dir``.
    """
    from pipeline.compress.build import CompressInputs, build_and_evaluate, preflight

    out = Path(output_dir or args.output_dir)
    train = _examples(train_dataset, "train_dataset")
    dev = _examples(eval_dataset, "eval_dataset")
    _check_hooks(args, criterion, custom_calc_loss, custom_evaluate, data_collator)
    static = Path(args.input_infer_model_path) if args.input_infer_model_path else None
    preflight(args, train_size=len(train), static_model_dir=static)
    out.mkdir(parents=True, exist_ok=True)
    model_dir, tok = _model_and_tokenizer(model, tokenizer, out, args.max_seq_length, static, labels)
    num_labels = max(e.label for e in list(train) + list(dev)) + 1
    accuracy_fn = None
    if custom_evaluate is not None:
        import paddle

        loader = paddle.io.DataLoader(list(eval_dataset), batch_size=args.eval_batch_size, shuffle=False, collate_fn=data_collator)
        accuracy_fn = lambda session: custom_evaluate(session, loader)  # noqa: E731
    from pipeline.kinds.classification import Classification

    kind = Classification()
    from pipeline.quantization.select import heldout_examples

    inp = CompressInputs(model_dir=model_dir, static_model_dir=static, tokenizer=tok,
                         train=kind.featurize(tok, train), dev=kind.featurize(tok, dev),
                         heldout=kind.featurize(tok, heldout_examples(train, 0, max(1, len(train) // 10))),
                         num_labels=num_labels, max_seq_len=args.max_seq_length, baseline_accuracy=None)
    work = out / ".work"
    built = build_and_evaluate(args, inp, out, work, log=log, accuracy_fn=accuracy_fn, max_accuracy_drop=args.max_accuracy_drop)
    cands = built.candidates
    selection = select(cands, args.max_accuracy_drop, built.timing, built.duel)
    built = dataclasses.replace(built, duel=None)  # closes the candidates' sessions
    write_table(out, cands, selection, cands[0].accuracy, args.max_accuracy_drop, screen=built.screen, skipped=built.skipped)
    if selection.selected is not None:
        (out / "selected.json").write_text(selected_candidate(selection.selected).to_json(), encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    log(f"[compress] {selection.message}")
    return CompressResult(cands, selection, out)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _examples(dataset: Sequence[Any], name: str) -> list[Example]:
    out = []
    for i, row in enumerate(dataset):
        if isinstance(row, Example):
            out.append(row)
        elif isinstance(row, dict) and "text_a" in row and "label" in row:
            out.append(Example(str(row["text_a"]), row.get("text_b"), int(row["label"])))
        else:
            raise DataError(f"{name}[{i}]: expected a pipeline.data.Example or a dict with text_a and label, got {type(row).__name__}")
    if not out:
        raise DataError(f"{name} is empty")
    return out


def _model_and_tokenizer(model, tokenizer, out: Path, max_seq_len: int, static: Path | None, labels):
    if isinstance(tokenizer, Tokenizer):
        tok = tokenizer
    elif isinstance(tokenizer, (str, Path)):
        tok = Tokenizer.from_model_dir(Path(tokenizer), max_seq_len)
    else:
        raise ConfigError(f"tokenizer: expected a pipeline.tokenizer.Tokenizer or a dir with vocab.txt, got {type(tokenizer).__name__}")
    if static is not None:
        return None, tok
    if isinstance(model, (str, Path)):
        return Path(model), tok
    # A dygraph model object: save it as a PaddleNLP dir (the training helpers take directories).
    from pipeline.modeling import save_classifier

    model_dir = out / "fp32_model"
    names = list(labels) if labels else [str(i) for i in range(model.num_labels if hasattr(model, "num_labels") else 0)]
    save_classifier(model, model_dir, tok.vocab_file.parent, names, names)
    return model_dir, tok
