"""The platform's floor for ``make perf``: an echo model with the bundle's own interface, served by the same
tritonserver beside the bundle, that does only what no served model can avoid.

It reads every input of every request (the texts come out of Triton's shared memory as numpy arrays, as the
bundle's model reads them), then answers each request with constant outputs of the declared types and shapes: no
decode checks, no tokenizer, no engine, no post-processing.  Its rate is what Triton's front end, the python
backend's IPC and the client cost on this machine; served / (1/(1/model-only + 1/floor)) says how much of what is
left our own request code takes (issue 38).  (Around a request that takes the model's time the platform costs a little
more than around an instant one, ~0.3-0.4 ms at 4 ms on Zen 4: MEASUREMENTS.md, "The platform floor and the lone
request".)

The echo model gets the configuration of the model clients call (the ensemble's inputs and outputs; the batching
and instances of the bundle's first python model, which is where requests queue), in a model repository of its own
(a temporary folder, passed to tritonserver as a second ``--model-repository``): the bundle itself is never
touched (bundle.json covers every file in it).
"""

from __future__ import annotations

from pathlib import Path

from serving.bundle.model_config import parse_pbtxt, to_pbtxt

# Standard library and numpy only: it runs in the stub's interpreter, as the bundle's own models do.
ECHO_MODEL = '''"""Floor model for make perf: reads each request's inputs and answers constant outputs of the declared types."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

_DTYPES = {"TYPE_STRING": np.object_, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64, "TYPE_INT64": np.int64,
           "TYPE_INT32": np.int32, "TYPE_BOOL": np.bool_}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [(o["name"], _DTYPES[o["data_type"]], [d if d > 0 else 1 for d in o["dims"]])
                        for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            arrays = [pb_utils.get_input_tensor_by_name(request, name) for name in self.inputs]
            arrays = [a.as_numpy() for a in arrays if a is not None]
            n = len(arrays[0]) if arrays and self.batched else None
            tensors = []
            for name, dtype, dims in self.outputs:
                shape = ([n] if n is not None else []) + dims
                value = np.full(shape, b"", dtype=np.object_) if dtype is np.object_ else np.zeros(shape, dtype=dtype)
                tensors.append(pb_utils.Tensor(name, value))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
'''


def floor_name(entry: str) -> str:
    return f"{entry}_floor"


def write_floor_repository(bundle: Path, entry: str, first: str, out: Path) -> str:
    """A model repository in ``out`` holding the echo model for the bundle's served model ``entry`` (its inputs and
    outputs), batched and instanced like ``first`` (the python model requests reach first: the fused model, or the
    ensemble's tokenizer).  Returns the echo model's name."""
    served = parse_pbtxt((bundle / entry / "config.pbtxt").read_text(encoding="utf-8"))
    scheduled = parse_pbtxt((bundle / first / "config.pbtxt").read_text(encoding="utf-8"))
    cfg = type(served)(name=floor_name(entry), backend="python", max_batch_size=served.max_batch_size)
    cfg.input.extend(served.input)
    cfg.output.extend(served.output)
    if scheduled.HasField("dynamic_batching"):
        cfg.dynamic_batching.CopyFrom(scheduled.dynamic_batching)
    cfg.instance_group.extend(scheduled.instance_group)
    folder = Path(out) / cfg.name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(to_pbtxt(cfg), encoding="utf-8")
    (folder / "1" / "model.py").write_text(ECHO_MODEL, encoding="utf-8")
    return cfg.name
