"""The ``package:`` and ``deploy:`` sections of a task config.  Owned by the package stage / serving.bundle; read by
``pipeline/config.py`` (the one pipeline module besides the package stage that imports serving).

Validated in ``__post_init__`` so a bad value fails when the config is loaded, naming the key; the error type is
``pipeline.errors.ConfigError`` (so the CLI maps it to exit code 2).  Which engines a bundle can serve in-process
(``python-<engine>``) is the engine registry's list (``pipeline.backends.registry``, read when asked; light: no engine is imported).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

# package.runtime (and its Triton backend) "onnxruntime": Triton's own ONNX Runtime backend, not the python backend
# running a registered engine
TRITON_ORT = "onnxruntime"


def runtimes() -> dict[str, tuple[str, str]]:
    """``package.runtime`` -> (Triton backend, engine inside it).  ``python-<engine>``: the engine run in-process on
    the python backend (it runs on any Triton, the one here too), one for each engine a bundle can serve: the
    registry's list, read when asked (``pipeline.backends.registry.served_engines``: ONNX Runtime, OpenVINO, Paddle
    Inference)."""
    from pipeline.backends.registry import served_engines

    return {
        # python backend, the engine of the form compress selected and validate verified (on the packaging CPU),
        # resolved by the package stage (PackageConfig.resolved)
        "auto": ("python", "auto"),
        **{f"python-{e.name}": ("python", e.name) for e in served_engines()},
        TRITON_ORT: (TRITON_ORT, "onnxruntime"),  # Triton's native ORT backend (optional TensorRT accelerator)
        "fastdeploy": ("fastdeploy", "fastdeploy"),  # FastDeploy serving image's backend
    }


PRECISIONS = ("auto", "int8", "fp32")
ACCELERATORS = ("none", "tensorrt-fp16", "tensorrt-int8")


@dataclass(frozen=True)
class FastDeployEngine:
    """One of FastDeploy serving's runtime options (``package.fastdeploy_engine``): which export form it loads and
    the accelerator parameters its config.pbtxt gives it.  FastDeploy's serving backend opens only
    ``<version>/model.onnx`` or ``model.pdmodel`` + ``model.pdiparams`` (serving/src/fastdeploy_runtime.cc,
    LoadModel): never an OpenVINO IR."""

    form: str | None  # an ONNX form ("onnx_int8": int8.onnx on a CPU, the FP32 ONNX on a GPU); None: the Paddle program
    parameters: Callable[["PackageConfig"], dict[str, str]]
    gpu_only: bool = False


FASTDEPLOY = {
    # Paddle Inference with oneDNN
    "paddle": FastDeployEngine(None, lambda pc: {"cpu_threads": str(pc.engine_threads), "use_mkldnn": "1"}),
    "onnxruntime": FastDeployEngine("onnx_int8", lambda pc: {"cpu_threads": str(pc.engine_threads)}),
    # a quantized (QDQ) model switches TensorRT to int8 by itself
    "tensorrt": FastDeployEngine("onnx_int8_qdq", lambda pc: {"precision": "trt_fp16"}, gpu_only=True),
    # FastDeploy's OpenVINO backend reads Paddle or ONNX (fastdeploy/runtime/backends/openvino/ov_backend.cc:
    # InitFromPaddle / InitFromOnnx).  The QDQ ONNX carries the same kind of fixed-scale INT8 recipe, and OpenVINO
    # runs Q/DQ pairs as INT8 (it reads them as FakeQuantize, as in an NNCF IR); int8.onnx's MatMulIntegerToFloat is
    # an ONNX Runtime contrib op OpenVINO does not read.  cpu_threads is the total over all instances
    # (serving/docs/EN/model_configuration-en.md), num_streams one per instance.
    "openvino": FastDeployEngine("onnx_int8_qdq", lambda pc: {"cpu_threads": str(pc.engine_threads * pc.instances),
                                                              "num_streams": str(pc.instances)}),
}
FASTDEPLOY_ENGINES = tuple(FASTDEPLOY)
# package.device: the device the bundle's models run on (Triton's instance_group kind): see PackageConfig.device.
DEVICES = ("CPU", "GPU")
# ensemble: tokenizer -> model -> postprocess, three Triton models; fused: one python model doing all three
# in one process (every task kind on a python runtime: two fewer IPC hops per request, and no other stub competing
# with the engine's threads for the cores); auto: fused where it applies, else ensemble (the task kind decides:
# serving.bundle.kinds.BundleKind.layout).  Measured on TNEWS, CLUENER, UIE and CMRC2018: MEASUREMENTS.md.
LAYOUTS = ("auto", "ensemble", "fused")
VERSION_POLICIES = ("latest", "all")
# The served interface: ernie-bundle (ours: label codes, descriptions, probabilities, top-k, JSON entities/spans) or
# fastdeploy (the model names, tensors and payloads of FastDeploy's ERNIE 3.0 and UIE serving examples, so their
# clients work unchanged; serving/bundle/fastdeploy_api.py has the whole contract).
APIS = ("ernie-bundle", "fastdeploy")


def _cores() -> int:
    """CPU cores this process may use (the affinity mask: a container's share, not the host's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _config_error(message: str) -> Exception:
    try:
        from pipeline.errors import ConfigError
    except ImportError:  # serving installed on its own
        return ValueError(message)
    return ConfigError(message)


@dataclass
class PackageConfig:
    runtime: str = "auto"
    layout: str = "auto"
    precision: str = "auto"  # auto: validate's chosen model (int8 when it exists), else fp32
    accelerator: str = "none"  # runtime=onnxruntime: TensorRT execution accelerator (GPU)
    fastdeploy_engine: str = "onnxruntime"  # runtime=fastdeploy: paddle | onnxruntime | tensorrt | openvino
    repository: str = "model_repository"  # relative to the project root; the task's bundle is <repository>/<task>
    max_batch_size: int = 64  # per model; a request with more texts is refused by Triton; 0: no batching
    preferred_batch_size: int = 16
    # 0: no waiting; the batcher still merges requests that queued while an instance was busy.
    # Measured on the tiny model, 2 cores, gRPC: 0 µs gave 636 req/s at concurrency 1 and 1372 at 16;
    # 2000 µs gave 98 and 981 (each of the three batched models in the ensemble waits).
    max_queue_delay_microseconds: int = 0
    # 0: on CPU, ONNX Runtime gets one instance per core of the packaging machine and OpenVINO one instance with
    # every core (``ServedEngine.one_instance``; 1 on GPU); each instance cores/instances intra-op threads.  Chosen by make perf on the TNEWS
    # bundle (MEASUREMENTS.md): ORT served more with 2 instances x 1 thread, OpenVINO with 1 x 2 at every
    # concurrency (its batches grow larger and its threads split one GEMM better than two processes share cores).
    # Reading comprehension and UIE (whole requests, nothing batched) get 2 x every core on OpenVINO instead
    # (``BundleKind.serving_defaults``); a make tune record measured for the bundle here overrides either.
    instance_count: int = 0
    # The device the bundle's model runs on: CPU or GPU (Triton's instance_group ``kind``, KIND_CPU / KIND_GPU, of
    # the model that runs the engine; tokenization and post-processing stay on CPU; it was package.kind, a name
    # that read as a task kind, which is the config's ``type``).  It also decides the device validate verifies the shipped backend on (GPU:
    # the GPU runtimes of pipeline.backends.registry, so FP32 or QDQ ONNX or Paddle's forms; int8.onnx's integer
    # MatMuls are CPU kernels), the packages the bundle's requirements install (onnxruntime-gpu, paddlepaddle-gpu)
    # and 1 instance per model by default.
    device: str = "CPU"
    threads: int = 0  # intra-op threads of each in-process engine instance; 0: cores / instances (see above)
    version_policy: str = "latest"
    top_k: int = 3
    max_text_bytes: int = 65536  # longer texts are refused per request (they would be truncated anyway)
    api: str = "ernie-bundle"  # one of APIS; the task kinds fastdeploy covers are checked with the task (pipeline.config)

    def __post_init__(self) -> None:
        known = runtimes()
        if self.runtime not in known:
            raise _config_error(f"package.runtime: {self.runtime!r} is not one of {', '.join(known)}")
        if self.layout not in LAYOUTS:
            raise _config_error(f"package.layout: {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        if self.layout == "fused" and known[self.runtime][0] != "python":
            python = ", ".join(r for r, (backend, _) in known.items() if backend == "python")
            raise _config_error(f"package.layout: fused needs a python runtime ({python}), not {self.runtime}")
        if self.precision not in PRECISIONS:
            raise _config_error(f"package.precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.accelerator not in ACCELERATORS:
            raise _config_error(f"package.accelerator: {self.accelerator!r} is not one of {', '.join(ACCELERATORS)}")
        if self.accelerator != "none" and (self.runtime != TRITON_ORT or self.device != "GPU"):
            raise _config_error("package.accelerator: TensorRT needs runtime: onnxruntime and device: GPU")
        if self.fastdeploy_engine not in FASTDEPLOY_ENGINES:
            raise _config_error(
                f"package.fastdeploy_engine: {self.fastdeploy_engine!r} is not one of {', '.join(FASTDEPLOY_ENGINES)}"
            )
        if self.runtime == "fastdeploy" and FASTDEPLOY[self.fastdeploy_engine].gpu_only and self.device != "GPU":
            raise _config_error(f"package.fastdeploy_engine: {self.fastdeploy_engine} needs device: GPU")
        if self.api not in APIS:
            raise _config_error(f"package.api: {self.api!r} is not one of {', '.join(APIS)}")
        if self.device not in DEVICES:
            raise _config_error(f"package.device: {self.device!r} is not one of {', '.join(DEVICES)}")
        if self.version_policy not in VERSION_POLICIES:
            raise _config_error(f"package.version_policy: {self.version_policy!r} is not one of {', '.join(VERSION_POLICIES)}")
        if not self.repository:
            raise _config_error("package.repository: a directory is required")
        for name in ("preferred_batch_size", "top_k", "max_text_bytes"):
            if getattr(self, name) < 1:
                raise _config_error(f"package.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_batch_size", "max_queue_delay_microseconds", "threads", "instance_count"):
            if getattr(self, name) < 0:
                raise _config_error(f"package.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_batch_size and self.preferred_batch_size > self.max_batch_size:
            raise _config_error(
                f"package.preferred_batch_size {self.preferred_batch_size} is larger than max_batch_size {self.max_batch_size}"
            )

    @property
    def runtime_device(self) -> str:
        """``device`` as the registry's runtimes name it: "cpu" or "gpu"."""
        return "gpu" if self.device == "GPU" else "cpu"

    @property
    def instances(self) -> int:
        """Instances per model: ``instance_count``, or with 0: 1 on GPU; on CPU one with every core for an engine
        whose one request uses them all (OpenVINO), else one per core here (see ``instance_count``)."""
        if self.instance_count:
            return self.instance_count
        return 1 if self.device == "GPU" or self.engine_takes_every_core else _cores()

    @property
    def engine_takes_every_core(self) -> bool:
        """The served engine runs one request on every core (``ServedEngine.one_instance``: OpenVINO), rather than
        one instance per core (ONNX Runtime)."""
        from pipeline.backends.registry import served_engine

        served = served_engine(self.engine)
        return served is not None and served.one_instance

    @property
    def engine_threads(self) -> int:
        """Intra-op threads of each in-process engine: ``threads``, or with 0 the cores shared out among
        the instances (never more threads than cores in all: oversubscribed pools stall each other)."""
        return self.threads or max(1, _cores() // self.instances)

    @property
    def backend(self) -> str:
        return runtimes()[self.runtime][0]

    @property
    def engine(self) -> str:
        return runtimes()[self.runtime][1]

    def resolved(self, engine: str) -> "PackageConfig":
        """``runtime: auto`` made concrete for the form being shipped (``engine``: the served engine that runs it);
        any other runtime is returned as it is."""
        import dataclasses

        if self.runtime != "auto":
            return self
        runtime = f"python-{engine}"
        if runtime not in runtimes():
            raise _config_error(f"package.runtime auto: no python runtime runs the {engine} engine")
        return dataclasses.replace(self, runtime=runtime)


# What a cluster can schedule for one model server: the HPA's ceiling, and a pod's CPU (cores) and memory (bytes).
# Below 0.1 core or 256 MiB Triton with a model does not start in time; above, no node is that big.
MAX_REPLICAS = 1000
QUANTITY_BOUNDS = {"cpu": (0.1, 256.0, "cores"), "memory": (256 * 2**20, 4 * 2**40, "bytes")}
# The URI schemes KServe's storage initializer (v0.20) downloads from; file:// names a path inside the initializer's
# own container, never the bundle.
STORAGE_SCHEMES = ("pvc", "s3", "gs", "hdfs", "webhdfs", "https", "http", "oci", "hf")


def object_name(task: str) -> str:
    """Every Kubernetes object's name for ``task``'s bundle: ``ernie-bundle-<task>``."""
    return f"ernie-bundle-{task}".replace("_", "-").lower()


def object_name_refused(task: str) -> str | None:
    """Why Kubernetes would refuse ``object_name(task)``, None when it takes it: a Service's name must be a DNS-1035
    label, and Kubernetes checks names on apply (the schemas do not).  The task config asks before any stage runs;
    the manifests ask again for a bundle's recorded task."""
    name = object_name(task)
    if len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        return None
    return (f"task: {task!r} would name the bundle's Kubernetes objects {name!r}, not a DNS-1035 label (letters, "
            "digits and '-', at most 63 characters): Kubernetes would refuse the Service")


@dataclass
class DeployConfig:
    """The ``deploy:`` section: what the Kubernetes / KServe manifests written beside a bundle say
    (``serving.bundle.manifests``).  Empty ``cpu``/``memory``: derived from the bundle (the cores its instances
    and engine threads were validated with; its size)."""

    image: str = "ernie-bundle-{task}:latest"  # the image the Dockerfile builds; {task} is filled in
    namespace: str = "default"
    min_replicas: int = 1
    max_replicas: int = 4
    cpu: str = ""  # Kubernetes quantity, request = limit (Guaranteed QoS: no CPU throttling surprises)
    memory: str = ""
    target_cpu_utilization: int = 70  # HPA target, percent of the CPU request
    # The bundle as a read-only volume (a PVC holding model_repository/); KServe reads storage_uri instead.
    bundle_claim: str = "ernie-bundles"
    storage_uri: str = "pvc://ernie-bundles/{task}"
    kubernetes_version: str = "1.33"  # schemas the objects are validated against (kubernetes-validate)
    queue_time_metric: bool = False  # HPA also scales on Triton's queue time (needs a custom-metrics adapter)
    # The PrometheusRule's drift alert: the served answers' mix over an hour this far (total variation distance, 0-1)
    # from the dev set's, validate's; 0: no such alert.
    answer_drift: float = 0.1

    def __post_init__(self) -> None:
        if not self.image:
            raise _config_error("deploy.image: an image name is required")
        if self.min_replicas < 1 or self.max_replicas < self.min_replicas:
            raise _config_error(f"deploy: need 1 <= min_replicas <= max_replicas, got {self.min_replicas} and "
                                f"{self.max_replicas}")
        if not 1 <= self.target_cpu_utilization <= 100:
            raise _config_error(f"deploy.target_cpu_utilization must be 1..100, got {self.target_cpu_utilization}")
        if self.max_replicas > MAX_REPLICAS:
            raise _config_error(f"deploy.max_replicas: {self.max_replicas} is more than a cluster schedules for one "
                                f"model server (at most {MAX_REPLICAS})")
        for name in ("cpu", "memory"):
            value = getattr(self, name)
            if value and not _is_quantity(value):
                raise _config_error(f"deploy.{name}: {value!r} is not a Kubernetes quantity (e.g. 2, 500m, 1Gi)")
            low, high, unit = QUANTITY_BOUNDS[name]
            if value and not low <= _quantity(value) <= high:
                raise _config_error(f"deploy.{name}: {value!r} is outside what one Triton pod can be given "
                                    f"({_fmt_bound(low, unit)} to {_fmt_bound(high, unit)})")
        # Names Kubernetes checks when the objects are applied (the schemas do not): refused here, not by kubectl.
        if not _is_dns1123_label(self.namespace):
            raise _config_error(f"deploy.namespace: {self.namespace!r} is not a DNS-1123 label (lower-case letters, "
                                "digits and '-', starting and ending with a letter or digit, at most 63 characters)")
        if not _is_dns1123_subdomain(self.bundle_claim):
            raise _config_error(f"deploy.bundle_claim: {self.bundle_claim!r} is not a DNS-1123 subdomain (a "
                                "PersistentVolumeClaim name: lower-case letters, digits, '-' and '.', at most 253 characters)")
        for name in ("image", "storage_uri"):
            try:
                filled = getattr(self, name).format(task="x")
            except (KeyError, IndexError, ValueError, AttributeError) as exc:
                raise _config_error(f"deploy.{name}: {getattr(self, name)!r}: only {{task}} is filled in ({exc!r})") from None
            if name == "image" and not _is_image(filled):
                raise _config_error(f"deploy.image: {self.image!r} is not an image reference "
                                    "([registry[:port]/]name[:tag][@digest], lower-case name, no spaces)")
            scheme = re.fullmatch(r"([a-z][a-z0-9+.-]*)://\S+", filled)
            if name == "storage_uri" and (not scheme or scheme.group(1) not in STORAGE_SCHEMES):
                raise _config_error(f"deploy.storage_uri: {self.storage_uri!r} is not a URI KServe's storage "
                                    f"initializer reads ({', '.join(s + '://' for s in STORAGE_SCHEMES)}; e.g. "
                                    "pvc://<claim>/{task}, s3://bucket/path)")
        if not 0 <= self.answer_drift < 1:
            raise _config_error(f"deploy.answer_drift must be in [0, 1) (a total variation distance; 0: no drift alert), "
                                f"got {self.answer_drift}")
        _check_kubernetes_version(self.kubernetes_version)


def _check_kubernetes_version(version: str) -> None:
    """``deploy.kubernetes_version``: MAJOR.MINOR with schemas in kubernetes-validate (when it is installed)."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", str(version))
    if not m:
        raise _config_error(f"deploy.kubernetes_version: {version!r} is not a Kubernetes version (e.g. 1.33)")
    try:
        from kubernetes_validate.utils import all_versions
    except ImportError:  # serving installed on its own: the syntax is all that can be checked
        return
    known = sorted({tuple(int(x) for x in v.split(".")[:2]) for v in all_versions()})
    wanted = (int(m.group(1)), int(m.group(2)))
    if not known[0] <= wanted <= known[-1]:
        hint = ""
        if wanted[1] < 10 and (wanted[0], wanted[1] * 10) in known:  # --set parses 1.30 as the number 1.3
            hint = f"; for {wanted[0]}.{wanted[1] * 10} quote it: deploy.kubernetes_version='\"{wanted[0]}.{wanted[1] * 10}\"'"
        raise _config_error(f"deploy.kubernetes_version: {version!r} has no schemas here (kubernetes-validate knows "
                            f"{known[0][0]}.{known[0][1]} to {known[-1][0]}.{known[-1][1]}){hint}")


def _is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value))


def _is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", value))


def _is_image(value: str) -> bool:
    """A container image reference as the distribution grammar has it (registry host, path, tag, digest)."""
    component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    host = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::\d+)?/)?"
    grammar = rf"{host}{component}(?:/{component})*(?::[\w][\w.-]{{0,127}})?(?:@[a-z0-9]+:[a-fA-F0-9]{{32,}})?"
    return len(value) <= 255 and bool(re.fullmatch(grammar, value))


_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def _quantity(value: str) -> float:
    """A Kubernetes quantity (already checked by ``_is_quantity``) as a number: cores for cpu, bytes for memory."""
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)(.*)", str(value))
    number, suffix = float(m.group(1)), m.group(2)
    if suffix[:1] in ("e", "E"):
        return number * 10.0 ** max(-400, min(400, int(suffix[1:])))  # 1e100 stays a float, never an overflow
    return number * _SUFFIX[suffix]


def _fmt_bound(value: float, unit: str) -> str:
    return f"{value:g} cores" if unit == "cores" else f"{value / 2**20:.0f}Mi" if value < 2**30 else f"{value / 2**30:.0f}Gi"


def _is_quantity(value: str) -> bool:
    """Kubernetes' quantity grammar: a number with an optional SI / binary / exponent suffix, positive here."""
    import re

    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+)?", str(value))
    return bool(m) and float(m.group(1)) > 0
