# Serving image for one task's bundle: Triton Inference Server + what the bundle's python models import.
#
#   make bundle TASK=tnews                          # writes model_repository/tnews (bundle.json, README.md, 4 models)
#   docker build --build-arg TASK=tnews -t ernie-bundle-tnews .
#   docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 ernie-bundle-tnews
#   (Triton binds 0.0.0.0 inside the container; --build-arg BIND_ADDRESS=127.0.0.1 for a sidecar-only image)
#   python -m serving.client classify --model tnews "国足今晚出战世预赛"
#
# GPU (runtime python-onnxruntime with package.kind GPU, or runtime onnxruntime with TensorRT):
#   docker build --build-arg TASK=tnews --build-arg ORT_PACKAGE=onnxruntime-gpu -t ernie-bundle-tnews-gpu .
#   docker run --gpus all ...
# The python-paddle runtime also needs Paddle Inference:  --build-arg EXTRA_PACKAGES="paddlepaddle==2.6.2"
# (paddlepaddle-gpu for GPU).  Runtime onnxruntime (native backend) needs nothing from pip for the model itself.
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
#
# 24.10 is Triton 2.51, the server that nvidia-pytriton 0.7.0 ships and the tests here run against.
ARG TRITON_VERSION=24.10
FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3

ARG TASK=tnews
# The image's Python is 3.10: onnxruntime 1.23.2 is the newest release with a cp310 wheel (the lock's
# 1.31.1 has none); everything the bundle's ONNX uses (MatMulIntegerToFloat, QuantizeLinear) is older.
ARG ORT_PACKAGE=onnxruntime==1.23.2
ARG EXTRA_PACKAGES=""
# Triton listens on every interface of the container (what a pod or `docker run -p` needs); set
# 127.0.0.1 to keep it inside the container.
ARG BIND_ADDRESS=0.0.0.0
ENV BIND_ADDRESS=${BIND_ADDRESS} PYTHONDONTWRITEBYTECODE=1

# Only what the python models import (serving/triton, serving/kinds/*/models): numpy, tokenizers (tokenizer model),
# onnxruntime or paddle (model runner), at requirements.lock's versions (tests/test_deploy.py checks):
# the served token ids must equal the pipeline's.
RUN python3 -m pip install --no-cache-dir "numpy==1.26.4" "tokenizers==0.23.3" "${ORT_PACKAGE}" ${EXTRA_PACKAGES}

# The bundle is its own model repository; bundle.json's SHA-256s are checked by every python model
# when it loads, so a file changed in the image after this step stops the server from starting.
COPY model_repository/${TASK} /models

EXPOSE 8000 8001 8002
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s CMD ["curl", "-fsS", "localhost:8000/v2/health/ready"]
CMD ["sh", "-c", "exec tritonserver --model-repository=/models --http-address=${BIND_ADDRESS} --grpc-address=${BIND_ADDRESS} --metrics-address=${BIND_ADDRESS} --strict-readiness=true --exit-on-error=true"]
