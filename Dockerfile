# Serving image for one task's bundle: Triton Inference Server + what the bundle's python models import.
#
#   make bundle TASK=tnews                          # writes model_repository/tnews (bundle.json, README.md, 4 models)
#   docker build --build-arg TASK=tnews -t ernie-bundle-tnews .
#   docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 ernie-bundle-tnews
#   python -m serving.client classify --model tnews "国足今晚出战世预赛"
#
# GPU (runtime python-onnxruntime with package.kind GPU, or runtime onnxruntime with TensorRT):
#   docker build --build-arg TASK=tnews --build-arg ORT_PACKAGE=onnxruntime-gpu -t ernie-bundle-tnews-gpu .
#   docker run --gpus all ...
# The python-paddle runtime also needs Paddle Inference:  --build-arg EXTRA_PACKAGES="paddlepaddle==2.6.2"
# (paddlepaddle-gpu for GPU).  Runtimes onnxruntime (native backend) and fastdeploy need nothing from pip
# for the model itself; a fastdeploy bundle runs in the FastDeploy serving image instead
# (registry.baidubce.com/paddlepaddle/fastdeploy:<ver>-cpu-only-21.10 / -gpu-...), same COPY and command.
#
# 24.10 is Triton 2.51, the server that nvidia-pytriton 0.7.0 ships and the tests here run against.
ARG TRITON_VERSION=24.10
FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3

ARG TASK=tnews
ARG ORT_PACKAGE=onnxruntime
ARG EXTRA_PACKAGES=""

# Only what the python models import (serving/models/*.py): numpy, tokenizers (tokenizer model),
# onnxruntime or paddle (model runner).  tokenizers is pinned to requirements.lock's version: the
# served token ids must equal the pipeline's.  The image's Python is 3.10, so onnxruntime is left to
# pip's resolver (its newest releases may need a newer Python than the lock's pin).
RUN python3 -m pip install --no-cache-dir "numpy<2" "tokenizers==0.23.3" "${ORT_PACKAGE}" ${EXTRA_PACKAGES}

# The bundle is its own model repository; bundle.json's SHA-256s are checked by every python model
# when it loads, so a file changed in the image after this step stops the server from starting.
COPY model_repository/${TASK} /models

EXPOSE 8000 8001 8002
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s CMD curl -fsS localhost:8000/v2/health/ready || exit 1
CMD ["tritonserver", "--model-repository=/models", "--strict-readiness=true", "--exit-on-error=true"]
