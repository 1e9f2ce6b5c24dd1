"""The memory a bundle holds when served, measured at package time: what its Kubernetes memory request is made of.

The served engine is nearly all of it.  OpenVINO keeps compiled kernels for every input shape it has run, and the
server warms every (rows, width) bucket at load (``pipeline/backends/openvino/served.py``): ~4 MB a shape, so a
TNEWS engine holds ~1.4 GB where its model file is 16 MiB (MEASUREMENTS.md).  A size guessed from the bundle's files
(the earlier "1 GiB + 3 x the bundle") put a pod under its own working set.

So each python model folder that runs an engine (``engine.py`` in it: the fused model's, with ``runner.py`` beside
its ``model.py``, or the ensemble's ``<task>_model``, whose ``model.py`` is the runner) is loaded in a fresh child
process exactly as the stub loads it: the folder's own ``make_engine`` with its config's parameters, warmed
for its config's batch limit (an engine that does not warm runs its largest batch once instead).  The child's peak
resident memory (``VmHWM``: Python, numpy, the engine and its kernels) is one instance's; the pod needs every
instance's, plus an allowance for each other python model instance (tokenizer or post-processing stubs) and for
tritonserver with its shared memory and requests in flight.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SERVER_MIB = 256  # tritonserver (~40 MiB resident), the python backend's shared memory, requests in flight
PYTHON_STUB_MIB = 128  # a python model without an engine: the stub, Python, numpy, the tokenizer
HEADROOM = 1.10  # the measured peak is one load on one machine; allocators and other CPUs vary

# Runs in the child: the model folder's own files, as the stub runs them (model_support.initialize, runner_engine).
_CHILD = r"""
import json, sys
from pathlib import Path
folder, params, max_batch, runner = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.dont_write_bytecode = True
sys.path.insert(0, str(folder))
import numpy as np
import model_support
rows = model_support.engine_rows(max_batch)
engine = model_support.sibling(folder, runner).make_engine(folder, params, False, rows)
width = int(params.get("max_seq_len", "0") or 0)
if not hasattr(engine, "warm") and width:  # an engine that does not warm: its largest batch is its peak
    ids = np.zeros((rows, width), dtype=np.int64)
    engine({"input_ids": ids, "token_type_ids": ids})
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
print(json.dumps({"peak_kib": int(status["VmHWM"].split()[0])}))
"""


class MemoryNotMeasured(RuntimeError):
    """The engine could not be loaded here: one line, the sizing falls back to its estimate and says why."""


@dataclass(frozen=True)
class EngineMemory:
    model: str  # the model folder that runs the engine
    instances: int
    peak_mib: float  # one instance's peak resident memory, loaded and warmed
    seconds: float  # how long the child took (load + warm-up: what the server's start pays per instance)


@dataclass(frozen=True)
class ServedMemory:
    engines: tuple[EngineMemory, ...]
    python_instances: int  # instances of python models without an engine

    def mib(self) -> int:
        """The pod's memory request in MiB, a multiple of 64."""
        total = SERVER_MIB + PYTHON_STUB_MIB * self.python_instances + sum(e.instances * e.peak_mib for e in self.engines)
        return 64 * math.ceil(total * HEADROOM / 64)

    def why(self) -> str:
        engines = " + ".join(f"{e.instances} x {e.peak_mib:.0f} MiB ({e.model}'s engine, loaded and warmed: measured)"
                             for e in self.engines)
        stubs = f" + {self.python_instances} x {PYTHON_STUB_MIB} MiB (python models)" if self.python_instances else ""
        return f"({SERVER_MIB} MiB (tritonserver){stubs} + {engines}) x {HEADROOM:.2f}"

    def as_dict(self) -> dict:
        return {"engines": [asdict(e) for e in self.engines], "python_instances": self.python_instances}

    @classmethod
    def from_dict(cls, d: dict) -> "ServedMemory":
        return cls(tuple(EngineMemory(**e) for e in d["engines"]), int(d["python_instances"]))


def _configs(bundle: Path):
    from serving.bundle.model_config import parse_pbtxt

    for path in sorted(Path(bundle).glob("*/config.pbtxt")):
        yield path.parent, parse_pbtxt(path.read_text(encoding="utf-8"))


def measure(bundle: Path, timeout: float = 900) -> ServedMemory:
    """Every python model of the bundle at ``bundle``: its engine's peak measured in a child (``MemoryNotMeasured``
    where one cannot run here: a GPU instance, a runtime this python lacks), the others counted."""
    engines, stubs = [], 0
    for folder, cfg in _configs(bundle):
        if cfg.platform == "ensemble":
            continue
        if cfg.backend != "python":  # Triton's onnxruntime, paddle or fastdeploy backend: not in this Triton
            raise MemoryNotMeasured(f"{folder.name} runs in Triton's {cfg.backend or cfg.platform} backend, which this "
                                    "Triton lacks")
        instances = sum(g.count or 1 for g in cfg.instance_group) or 1
        version = folder / "1"
        if not (version / "engine.py").is_file():  # a tokenizer or post-processing stub
            stubs += instances
            continue
        runner = "runner" if (version / "runner.py").is_file() else "model"  # fused: runner.py; ensemble: the model
        if any(g.kind == g.KIND_GPU for g in cfg.instance_group):
            raise MemoryNotMeasured(f"{folder.name} runs on a GPU, which this machine cannot load it on")
        params = {k: v.string_value for k, v in cfg.parameters.items()}
        t0 = time.monotonic()
        try:
            out = subprocess.run([sys.executable, "-B", "-c", _CHILD, str(version), json.dumps(params), str(cfg.max_batch_size),
                                  runner],
                                 capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        except subprocess.TimeoutExpired:
            raise MemoryNotMeasured(f"{folder.name}: loading its engine took over {timeout:g} s") from None
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise MemoryNotMeasured(f"{folder.name}: its engine did not load here ({last})")
        peak = json.loads(out.stdout.strip().splitlines()[-1])["peak_kib"] / 1024
        engines.append(EngineMemory(folder.name, instances, round(peak, 1), round(time.monotonic() - t0, 1)))
    if not engines:
        raise MemoryNotMeasured("no python model of the bundle runs an engine")
    return ServedMemory(tuple(engines), stubs)
