"""A served engine defined outside the pipeline, for the registration tests (tests/test_engine_registration.py,
tests/test_serving_server.py): ONNX Runtime
on one thread answering the *negated* logits, so that a label it serves can only have come from this engine (the
registered engines would serve the argmax).  Copied into the bundle as engine.py like every served engine: numpy and
onnxruntime only."""

from __future__ import annotations

import numpy as np


class Engine:
    def __init__(self, path, threads: int, gpu: bool, params: dict):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, feeds):
        return -np.asarray(self.session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})[0])
