"""The input and output tensor names a model file declares, read without running it.

Triton's native backends match a config's tensor names to the file's: onnxruntime by the graph's names, and
FastDeploy's backend (serving/src/fastdeploy_runtime.cc, ``ValidateInputs``/``ValidateOutputs``) refuses to load a
model whose config names a tensor the runtime does not have.  The export stage names the output ``logits``; a Paddle
program saved otherwise keeps ``paddle.jit.save``'s ``linear_N.tmp_M`` (as FastDeploy's own ERNIE example config
shows, ``linear_113.tmp_1``), so packaging reads the name instead of assuming it.
"""

from __future__ import annotations

from pathlib import Path


class ModelIOError(ValueError):
    """The model file cannot be read, or lacks a tensor the bundle needs."""


def tensor_names(model_file: Path) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of ``model.onnx`` or ``model.pdmodel`` (Paddle's feed / fetch variables), in file order."""
    model_file = Path(model_file)
    if model_file.suffix == ".onnx":
        import onnx

        try:
            graph = onnx.load(str(model_file), load_external_data=False).graph
        except Exception as exc:  # noqa: BLE001 - any parse failure is "not a readable ONNX file"
            raise ModelIOError(f"{model_file}: not a readable ONNX model ({exc})") from None
        weights = {t.name for t in graph.initializer}
        return [i.name for i in graph.input if i.name not in weights], [o.name for o in graph.output]
    if model_file.suffix == ".pdmodel":
        import numpy  # noqa: F401  (before paddle, always: see DEVELOPERS.md, import order)
        from paddle.base.proto import framework_pb2

        desc = framework_pb2.ProgramDesc()
        try:
            desc.ParseFromString(model_file.read_bytes())
        except Exception as exc:  # noqa: BLE001
            raise ModelIOError(f"{model_file}: not a readable Paddle program ({exc})") from None
        ops = desc.blocks[0].ops

        def args(op, side: str, slot: str) -> list[str]:
            return [a for v in getattr(op, side) if v.parameter == slot for a in v.arguments]

        feeds = sorted((op for op in ops if op.type == "feed"), key=_col)
        fetches = sorted((op for op in ops if op.type == "fetch"), key=_col)
        return ([n for op in feeds for n in args(op, "outputs", "Out")], [n for op in fetches for n in args(op, "inputs", "X")])
    raise ModelIOError(f"{model_file}: neither an ONNX (.onnx) nor a Paddle (.pdmodel) model")


def _col(op) -> int:
    """A feed/fetch op's ``col`` attribute: its position among the program's inputs / outputs."""
    for attr in op.attrs:
        if attr.name == "col":
            return int(attr.i)
    return 0


def logits_output(model_file: Path, inputs: tuple[str, ...]) -> str:
    """The single output of a classifier file taking ``inputs``; ModelIOError naming what differs."""
    ins, outs = tensor_names(model_file)
    missing = [n for n in inputs if n not in ins]
    if missing:
        raise ModelIOError(f"{model_file}: no input named {missing[0]!r} (the file has {', '.join(ins) or 'none'}); "
                           "Triton's native backends feed tensors by these names")
    if len(outs) != 1:
        raise ModelIOError(f"{model_file}: {len(outs)} outputs ({', '.join(outs)}); the bundle expects one, the logits")
    return outs[0]
