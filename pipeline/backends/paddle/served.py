"""Paddle Inference inside Triton's python backend: the engine ``runner.py`` runs a bundle's Paddle program with.

Copied into bundles as ``<task>_model/1/engine.py`` (``pipeline.backends.engine.ServedEngine``): it imports numpy
(before paddle, always) and Paddle Inference only."""

from __future__ import annotations

import numpy as np  # noqa: F401  (before paddle: paddle first crashes numpy's import)


class Engine:
    def __init__(self, path, threads: int, gpu: bool, params: dict):
        from paddle import inference

        config = inference.Config(str(path), str(path.with_suffix(".pdiparams")))
        if gpu:
            config.enable_use_gpu(256, 0)
        else:
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(threads or 1)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)
        self.inputs = self.predictor.get_input_names()

    def __call__(self, feeds):
        for name in self.inputs:
            self.predictor.get_input_handle(name).copy_from_cpu(feeds[name])
        self.predictor.run()
        return self.predictor.get_output_handle(self.predictor.get_output_names()[0]).copy_to_cpu()
