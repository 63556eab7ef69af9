# syntax=docker/dockerfile:1
# prep on a Ray cluster: one image for the head, the prepare workers and the trainers that read.
#
# Based on the official Ray image (Ray's expected layout: user `ray`, its Python on PATH, `ray start`),
# at the Ray version constraints/dev.txt pins. Two variants, chosen by build arguments:
#
#   CPU (prepare workers, the head; torch without CUDA, about 2 GB smaller):
#     docker build -t prep:cpu .
#   CUDA (trainers reading with prep.reader on GPUs):
#     docker build -t prep:cu128 --build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-cu128 \
#         --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
#
# Ray 2.60 turns token authentication on: every node (and `ray job submit`) needs the same token,
# passed at run time (never baked into the image).
#   export RAY_AUTH_TOKEN=$(python -c 'import secrets; print(secrets.token_hex(32))')   # once, kept secret
# Head:
#   docker run -d --name prep-head --shm-size=8g -p 6379:6379 -p 8265:8265 \
#       -e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN prep:cpu \
#       ray start --head --port=6379 --dashboard-host=0.0.0.0 --block
# Worker (on each node):
#   docker run -d --shm-size=8g -e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN prep:cpu \
#       ray start --address=HEAD_IP:6379 --block
# Submit a job (from any machine with this repo and the token):
#   RAY_AUTH_MODE=token RAY_AUTH_TOKEN=... ray job submit --address http://HEAD_IP:8265 --working-dir . -- \
#       python pipelines/pretokenize.py --config configs/gsm8k-sft.yaml --input s3://... --output s3://...
#
# /dev/shm: Ray's object store lives there and Docker's default is 64 MB, so pass --shm-size
# (about 30% of the node's memory; Ray falls back to slow disk spilling and warns when it is too small).
# Readers in DataLoader worker processes share batches through /dev/shm as well.

ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-cpu
FROM ${RAY_IMAGE}

# CPU wheels by default; the CUDA variant passes its wheel index (see above).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_DISABLE_USAGE_STATS=1

# Everything below runs as the Ray image's own non-root user (ray, uid 1000, group users), which owns
# its Python environment; the app directory is made by that user, so `pip install -e .` can write there.
USER 1000:100
RUN mkdir -p /home/ray/prep
WORKDIR /home/ray/prep

# torch first, from the variant's index, at the versions constraints/dev.txt pins (the set CI tests);
# then prep's other dependencies from the same file (a cached layer: code changes below do not reinstall them).
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" torch==2.14.1 torchvision==0.29.1
COPY --chown=1000:100 pyproject.toml README.md ./
COPY --chown=1000:100 constraints/dev.txt constraints/dev.txt
COPY --chown=1000:100 prep/__init__.py prep/__init__.py
RUN pip install --no-cache-dir -c constraints/dev.txt -e .

COPY --chown=1000:100 prep prep
COPY --chown=1000:100 pipelines pipelines
COPY --chown=1000:100 configs configs
COPY --chown=1000:100 examples examples

CMD ["prep", "--help"]
