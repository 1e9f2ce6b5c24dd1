# Serving image for one task's bundle: Triton Inference Server, the packages the bundle's python models import
# (the bundle's own requirements.txt, nothing kept by hand here) and the bundle, started through its check.
#
#   make bundle TASK=tnews        # writes model_repository/tnews: bundle.json, requirements.txt, README.md, the models
#   docker build --build-arg TASK=tnews -t ernie-bundle-tnews .
#   docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 ernie-bundle-tnews
#   python -m serving.client classify --model tnews "国足今晚出战世预赛"
#
# A classification bundle is one python model by default (package.layout fused: tokenizer, engine and labels in one
# process); the other kinds, and layout ensemble, are an ensemble of a tokenizer, the model and a post-processing
# model.  Triton binds every interface of the container (BIND_ADDRESS; 127.0.0.1 for a sidecar-only image).
#
# What is installed, and why this base image: requirements.txt pins numpy, tokenizers and the engine the bundle's model
# runs in (OpenVINO, ONNX Runtime or Paddle Inference: whichever compress measured fastest and validate passed) at the
# versions that validated it (requirements.lock), with no fallback.  Triton 24.12 (server 2.53) runs Python 3.12,
# which has wheels of every validated version (onnxruntime 1.31.1, openvino 2026.4.1, paddlepaddle 2.6.2, numpy
# 1.26.4).  Triton 24.10 (Python 3.10) has none of onnxruntime 1.31.1: its newest, 1.23.2, changed 12 of 10,000
# TNEWS dev predictions of the ONNX Runtime bundle against the validated version (MEASUREMENTS.md, 2026-11-28), so
# an ONNX Runtime bundle could not be served there as validated.  tests/test_image_env.py rebuilds this image's Python
# environment (Python 3.12, only the install line below) and serves a bundle of each engine in it: served == offline.
# What it cannot run is this image's own server: it uses nvidia-pytriton's Triton 2.51 with its Python 3.12 stub.
#
# GPU: a bundle packaged with package.kind GPU lists onnxruntime-gpu (paddlepaddle-gpu) instead, at the validated
# version: onnxruntime-gpu 1.31.1 has a cp312 wheel (pip download --python-version 3.12 says so).  Whether it loads
# the validated TensorRT / QDQ form on a GPU has not been checked (no GPU here).  Run it with docker run --gpus all.
#
# FastDeploy's serving image (registry.baidubce.com/paddlepaddle/fastdeploy:1.0.7-cpu-only-21.10, -gpu-...): the
# only image with Triton's "fastdeploy" backend, so the one where package.runtime fastdeploy bundles run (this image
# has no such backend).  package.api fastdeploy bundles (FastDeploy's example interface) run in either.  What differs
# there from this file, none of it tried here (no Docker, no network):
#   - FROM that image; the server binary is fastdeployserver (Triton 21.10): CMD ["fastdeployserver",
#     "--model-repository=/models", "--strict-readiness=true", "--exit-on-error=true"] (it listens on all interfaces).
#   - Its Python is 3.8: pip install "numpy==1.24.4" "tokenizers==0.20.3" (the newest with Python 3.8 wheels; the lock's
#     0.23.3 has none, so the served token ids are not those of the version tested here: run `make smoke` against it),
#     and for a python-onnxruntime model step or api fastdeploy's uie "onnxruntime==1.19.2"; python-paddle uses the
#     image's paddlepaddle.  The bundle's python files parse as Python 3.8 (tests/test_fastdeploy_api.py).
#   - Its python backend has no TritonError status codes and no pb_utils.Logger: the models fall back to
#     TritonError(message) and stderr, so a refused request gets its one-line message under the server's default
#     status instead of INVALID_ARGUMENT / HTTP 400 (serving/triton/model_support.py; tested with a stand-in pb_utils).
#   - runtime fastdeploy, engine openvino: the bundle ships model.onnx (the QDQ INT8 form, else FP32), never the
#     export's OpenVINO IR, which FastDeploy's backend cannot open (serving/bundle/repository.py choose_model).
ARG TRITON_VERSION=24.12
FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3

ARG TASK=tnews
# The Python of the base image: requirements.txt's python_version markers and tests/test_image_env.py (which rebuilds
# this environment with this Python and only the install line below) go by it; the build stops if the image runs
# another.
ARG SERVING_PYTHON=3.12
ARG BIND_ADDRESS=0.0.0.0
# Ubuntu 24.04 marks its Python as externally managed (PEP 668): this image is that Python's one user.
ENV BIND_ADDRESS=${BIND_ADDRESS} PYTHONDONTWRITEBYTECODE=1 PIP_BREAK_SYSTEM_PACKAGES=1

COPY model_repository/${TASK}/requirements.txt /tmp/requirements.txt
RUN python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '${SERVING_PYTHON}' else 'this image runs Python ' + v + ', not SERVING_PYTHON ${SERVING_PYTHON}')" \
 && python3 -m pip install --no-cache-dir -r /tmp/requirements.txt

# The entrypoint checks the bundle as `make serve` does, then becomes tritonserver: bytecode caches removed, every
# file's SHA-256 against bundle.json (nothing unlisted, no .pyc), the engine present (a warning line if its version
# is not the validated one).  The bundle is root's and read-only to the server's user: no cache can be written there.
COPY serving/triton/start.py serving/triton/integrity.py /opt/ernie-bundle/
COPY model_repository/${TASK} /models
RUN python3 /opt/ernie-bundle/start.py --check --model-repository=/models

# The image's triton-server user (uid 1000), as the Kubernetes Deployment and the KServe ServingRuntime run it.
USER 1000:1000
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s CMD ["curl", "-fsS", "localhost:8000/v2/health/ready"]
ENTRYPOINT ["python3", "/opt/ernie-bundle/start.py"]
CMD ["--model-repository=/models"]
