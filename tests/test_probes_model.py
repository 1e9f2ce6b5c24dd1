"""Probes of ``ernie-bundle run/status`` with a hostile-but-realistic model directory: weights that are a pickle
calling ``os.system``, config fields of the wrong type or size, vocabularies that are empty, not UTF-8 or a link to
/dev/zero.  Each is a real CLI invocation (in-process) with its exit code and its one-line refusal; a payload never
runs (its marker file never appears).  None trains: every refusal comes before any work."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import refusal_line, run_cli, tiny_cli_args


class _Payload:
    """Unpickling this calls ``func(arg)``: what a hostile model_state.pdparams does."""

    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return self.func, (self.arg,)


def _evil_weights(model: Path, marker: Path, how: str) -> None:
    """Replace ``model``'s weights with a pickle that creates ``marker`` when read."""
    p = model / "model_state.pdparams"
    if how == "os.system":
        p.write_bytes(pickle.dumps(_Payload(os.system, f"touch {marker}"), protocol=4))
    elif how == "exec":
        p.write_bytes(pickle.dumps(_Payload(exec, f"open({str(marker)!r}, 'w').close()"), protocol=4))
    elif how == "inside-a-real-state-dict":  # real arrays first, the payload as one more "parameter"
        from pipeline.safe_weights import load_state_dict

        state = load_state_dict(p)
        state["zz.payload"] = _Payload(os.system, f"touch {marker}")
        p.write_bytes(pickle.dumps(state, protocol=2))
    elif how == "protocol-0":  # text pickle: GLOBAL opcode, no PROTO header
        p.write_bytes(f"cos\nsystem\n(S'touch {marker}'\ntR.".encode())
    else:
        raise AssertionError(how)


def _config(model: Path, **fields) -> None:
    path = model / "config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg.update(fields)
    path.write_text(json.dumps(cfg), encoding="utf-8")


def _replace(model: Path, name: str, make) -> None:
    p = model / name
    p.unlink()
    make(p)


# -- item 5: weights are a pickle: never unpickled with paddle.load, nothing but arrays admitted -------------------

REFUSED = "refused: the file asks to call {}, which no Paddle weights file needs (a pickle can run code when it is read"


@pytest.mark.parametrize("how, refusal", [
    ("os.system", REFUSED.format("posix.system")),
    ("exec", REFUSED.format("builtins.exec")),
    ("inside-a-real-state-dict", REFUSED.format("posix.system")),
    # no protocol header: refused by the cheap check before the file is unpickled at all
    ("protocol-0", "cannot read weights (not a pickled Paddle state dict)"),
])
def test_run_refuses_weights_that_would_run_code(tiny_finetuned, tiny_model_copy, tmp_path, capsys, how, refusal):
    marker = tmp_path / "pwned"
    _evil_weights(tiny_model_copy, marker, how)
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_finetuned["task_yaml"], tmp_path / "runs"),
                      "--model", str(tiny_model_copy), "--until", "finetune-check")
    assert rc == 2
    assert refusal_line(err).startswith(f"error: {tiny_model_copy / 'model_state.pdparams'}: {refusal}")
    assert not marker.exists()


def test_status_reads_no_weights_and_run_refuses_them(tiny_finetuned, tiny_model_copy, tmp_path, capsys):
    """The reported case: a finished run, then the model's weights replaced by a payload.  ``status`` only reads:
    it unpickles nothing (the finetune row says its model input changed); ``run`` refuses the file in one line."""
    runs = tmp_path / "runs"
    args = [*tiny_cli_args(tiny_finetuned["task_yaml"], runs), "--model", str(tiny_model_copy)]
    rc, _, _ = run_cli(capsys, "run", *args, "--until", "finetune-check")
    assert rc == 0
    marker = tmp_path / "pwned"
    _evil_weights(tiny_model_copy, marker, "os.system")

    rc, out, err = run_cli(capsys, "status", *args)
    assert rc == 0 and not marker.exists(), err
    finetune_row = next(line for line in out.splitlines() if line.startswith("finetune "))
    assert "STALE" in finetune_row and "inputs changed: model" in finetune_row

    rc, _, err = run_cli(capsys, "run", *args, "--until", "finetune-check")
    assert rc == 2 and not marker.exists()
    assert refusal_line(err).startswith(f"error: {tiny_model_copy / 'model_state.pdparams'}: "
                                    + REFUSED.format("posix.system"))


def _object_array(model: Path) -> None:
    state = {"ernie.embeddings.word_embeddings.weight": np.array([1, "a"], dtype=object)}
    (model / "model_state.pdparams").write_bytes(pickle.dumps(state, protocol=4))


def _huge_empty_array(model: Path) -> None:
    # numpy's own reconstruction call, with a 2**40-element shape instead of (0,): an allocation, not an array.
    from numpy.core.multiarray import _reconstruct

    class Huge:
        def __reduce__(self):
            return _reconstruct, (np.ndarray, (1 << 40,), b"b")

    (model / "model_state.pdparams").write_bytes(pickle.dumps({"w": Huge()}, protocol=4))


def _ndarray_called_directly(model: Path) -> None:
    # NEWOBJ numpy.ndarray(shape=(2**33,), dtype=object): 64 GiB of None, were ndarray itself callable from the file.
    (model / "model_state.pdparams").write_bytes(
        b"\x80\x04\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94\x8a\x05\x00\x00\x00\x00\x02\x85\x8c\x01O\x86\x81.")


# -- model directory files: one line naming the file and the field --------------------------------------------------

PROBES = [
    # name, change to the model dir, the refusal after "error: <model dir>/"
    ("hidden_size is a string", lambda m: _config(m, hidden_size="abc"),
     "config.json: field 'hidden_size' must be a positive integer, got 'abc'"),
    ("hidden_size is a bool", lambda m: _config(m, hidden_size=True),
     "config.json: field 'hidden_size' must be a positive integer, got true"),
    ("hidden_size is a float", lambda m: _config(m, hidden_size=32.0),
     "config.json: field 'hidden_size' must be a positive integer, got 32.0"),
    ("num_hidden_layers negative", lambda m: _config(m, num_hidden_layers=-1),
     "config.json: field 'num_hidden_layers' must be a positive integer, got -1"),
    ("max_position_embeddings zero", lambda m: _config(m, max_position_embeddings=0),
     "config.json: field 'max_position_embeddings' must be a positive integer, got 0"),
    ("vocab_size a list", lambda m: _config(m, vocab_size=[76]),
     "config.json: field 'vocab_size' must be a positive integer, got [76]"),
    ("num_attention_heads null", lambda m: _config(m, num_attention_heads=None),
     "config.json: field 'num_attention_heads' must be a positive integer, got null"),
    ("architectures a string", lambda m: _config(m, architectures="ErnieForSequenceClassification"),
     "config.json: field 'architectures' must be a list of class names, got 'ErnieForSequenceClassification'"),
    ("architectures of numbers", lambda m: _config(m, architectures=[3]),
     "config.json: field 'architectures' must be a list of class names, got [3]"),
    ("id2label a list", lambda m: _config(m, id2label=["a", "b", "c"]),
     "config.json: field 'id2label' must be a mapping, got [\"a\", \"b\", \"c\"]"),
    ("config a list", lambda m: (m / "config.json").write_text("[1, 2]"),
     "config.json: expected a JSON object, got a list"),
    ("config a 5000-digit number", lambda m: (m / "config.json").write_text('{"hidden_size": ' + "9" * 5000 + "}"),
     "config.json: malformed JSON (Exceeds the limit (4300 digits) for integer string conversion"),
    ("config of 17 MiB", lambda m: os.truncate(m / "config.json", 17 << 20),
     "config.json: 17825792 bytes, over the 16 MiB limit for this file"),
    ("config a directory", lambda m: _replace(m, "config.json", Path.mkdir),
     "config.json: the model config is a directory, expected a file"),
    # absurd sizes are checked against the weights before a network of that size is built
    ("hidden_size absurd", lambda m: _config(m, hidden_size=10 ** 12),
     "config.json: hidden_size 1000000000000 but the weights' embeddings are 32 wide"),
    ("num_hidden_layers more than the weights", lambda m: _config(m, num_hidden_layers=2),
     "config.json: num_hidden_layers 2 but the weights hold 1 encoder layers"),
    ("max_position_embeddings more than the weights", lambda m: _config(m, max_position_embeddings=4096),
     "config.json: max_position_embeddings 4096 but the weights embed only 512 positions"),
    ("vocab_size below the vocabulary", lambda m: _config(m, vocab_size=10),
     "vocab.txt: 76 token ids but config.json has vocab_size 10 (ids past the embedding table)"),
    ("vocab empty", lambda m: (m / "vocab.txt").write_text(""), "vocab.txt: empty vocabulary"),
    ("vocab without [UNK]", lambda m: (m / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n的\n"),
     "vocab.txt: vocabulary has no [UNK] token (4 tokens)"),
    ("vocab not UTF-8", lambda m: (m / "vocab.txt").write_bytes("[PAD]\n[UNK]\n[CLS]\n[SEP]\n".encode() + b"caf\xe9\n"),
     "vocab.txt:5: not UTF-8 text (byte 0xe9)"),
    ("vocab a directory", lambda m: _replace(m, "vocab.txt", Path.mkdir),
     "vocab.txt: the tokenizer vocabulary is a directory, expected a file"),
    ("vocab a link to /dev/zero", lambda m: _replace(m, "vocab.txt", lambda p: p.symlink_to("/dev/zero")),
     "vocab.txt: the tokenizer vocabulary is not a regular file (a device, pipe or socket)"),
    ("vocab a broken link", lambda m: _replace(m, "vocab.txt", lambda p: p.symlink_to(m / "nowhere")),
     "vocab.txt: the tokenizer vocabulary is a broken symbolic link"),
    ("vocab larger than the weights' table", lambda m: ((m / "vocab.txt").write_text(
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\n" + "".join(f"t{i}\n" for i in range(100))), _config(m, vocab_size=104)),
     "vocab.txt: 104 token ids but the weights embed only 76 (ids past the embedding table)"),
    ("tokenizer config malformed", lambda m: (m / "tokenizer_config.json").write_text("{bad"),
     "tokenizer_config.json: malformed JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ("tokenizer config a list", lambda m: (m / "tokenizer_config.json").write_text("[]"),
     "tokenizer_config.json: expected a JSON object, got a list"),
    ("do_lower_case a string", lambda m: (m / "tokenizer_config.json").write_text('{"do_lower_case": "false"}'),
     "tokenizer_config.json: field 'do_lower_case' must be true or false, got 'false'"),
    ("labels a directory", lambda m: _replace(m, "labels.json", Path.mkdir),
     "labels.json: the label file is a directory, expected a file"),
    ("labels a FIFO", lambda m: _replace(m, "labels.json", os.mkfifo),
     "labels.json: the label file is not a regular file (a device, pipe or socket)"),
    ("labels not UTF-8", lambda m: (m / "labels.json").write_bytes(b'["100", "101", "10\xff"]'),
     "labels.json:1: not UTF-8 text (byte 0xff)"),
    ("weights a directory", lambda m: _replace(m, "model_state.pdparams", Path.mkdir),
     "model_state.pdparams: the weights file is a directory, expected a file"),
    ("weights a link to /dev/zero", lambda m: _replace(m, "model_state.pdparams", lambda p: p.symlink_to("/dev/zero")),
     "model_state.pdparams: the weights file is not a regular file (a device, pipe or socket)"),
    ("weights empty", lambda m: (m / "model_state.pdparams").write_bytes(b""),
     "model_state.pdparams: cannot read weights (not a pickled Paddle state dict)"),
    ("weights truncated", lambda m: (m / "model_state.pdparams").write_bytes((m / "model_state.pdparams").read_bytes()[:100]),
     "model_state.pdparams: cannot read weights (UnpicklingError: pickle data was truncated)"),
    ("weights a list", lambda m: (m / "model_state.pdparams").write_bytes(pickle.dumps([1, 2], protocol=4)),
     "model_state.pdparams: not a state dict (the file holds a list, expected a mapping of parameter names to arrays)"),
    ("weights an array of objects", _object_array,
     "model_state.pdparams: holds an array of Python objects, not numbers (not a Paddle weights file)"),
    ("weights allocating a 2**40 array", _huge_empty_array,
     "model_state.pdparams: cannot read weights (UnpicklingError: unexpected array reconstruction ('ndarray', (1099511627776,)))"),
    ("weights calling ndarray() directly", _ndarray_called_directly,
     "model_state.pdparams: cannot read weights (UnpicklingError: NEWOBJ class argument must be a type, not _NdarrayToken)"),
    ("weights of another network", lambda m: (m / "model_state.pdparams").write_bytes(
        pickle.dumps({"linear.weight": np.zeros((2, 2), np.float32)}, protocol=4)),
     "model_state.pdparams: no ERNIE word embeddings (embeddings.word_embeddings.weight): not an ERNIE checkpoint"),
]


@pytest.mark.parametrize("name, change, refusal", PROBES, ids=[p[0] for p in PROBES])
def test_run_refuses_a_broken_model_dir_in_one_line(tiny_finetuned, tiny_model_copy, tmp_path, capsys, name, change,
                                                    refusal):
    change(tiny_model_copy)
    rc, _, err = run_cli(capsys, "run", *tiny_cli_args(tiny_finetuned["task_yaml"], tmp_path / "runs"),
                      "--model", str(tiny_model_copy), "--until", "finetune-check")
    assert rc == 2
    assert refusal_line(err).startswith(f"error: {tiny_model_copy}/{refusal}")
    assert not (tmp_path / "runs" / "tiny" / "finetune" / "work").exists()  # nothing trained


def test_the_untouched_model_dir_runs(tiny_finetuned, tiny_model_copy, tmp_path, capsys):
    """The probes' baseline: the same command on the unchanged copy succeeds (the head is already there)."""
    rc, out, err = run_cli(capsys, "run", *tiny_cli_args(tiny_finetuned["task_yaml"], tmp_path / "runs"),
                        "--model", str(tiny_model_copy), "--until", "finetune-check")
    assert rc == 0, err
    assert "skipped training" in out
