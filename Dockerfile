# prep on a Ray node: the same environment the README's commands build, in an image.
# Build: docker build -t prep .      Run a head: docker run --rm -p 8265:8265 prep ray start --head --block --dashboard-host=0.0.0.0
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 TOKENIZERS_PARALLELISM=false RAY_DISABLE_USAGE_STATS=1
WORKDIR /opt/prep

# Dependencies first (cached layer), then the code.
COPY pyproject.toml README.md ./
COPY prep/__init__.py prep/__init__.py
RUN pip install --upgrade pip && pip install -e .

COPY prep prep
COPY pipelines pipelines
COPY configs configs
COPY examples examples

CMD ["prep", "--help"]
