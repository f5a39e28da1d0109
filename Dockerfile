# precision-hpo worker image (also serves the dashboard in docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HPO_CACHE_DIR=/cache/tokenized \
    HF_HOME=/cache/huggingface \
    MPLCONFIGDIR=/cache/matplotlib

# torch first and pinned, from the CPU index, so `pip install .` keeps it instead of pulling
# several GB of CUDA packages (same pin as the README). For NVIDIA GPUs build with
# --build-arg TORCH_INDEX_URL=https://pypi.org/simple (PyPI's torch is the CUDA build).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install torch==2.13.0 --index-url "$TORCH_INDEX_URL"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY hpo ./hpo
COPY trial_executor ./trial_executor
COPY search_spaces ./search_spaces
COPY docker/make-dirs.sh /usr/local/bin/make-dirs.sh
# The tracking extra: --track mlflow / --track tensorboard /artifacts/tensorboard work in the container.
# Ray clusters (deploy/kuberay, deploy/slurm): --build-arg EXTRAS=tracking,ray
ARG EXTRAS=tracking
RUN pip install ".[${EXTRAS}]" && useradd --create-home --uid 1000 hpo && make-dirs.sh hpo

USER hpo
# Relative paths (the default SQLite file, ./hpo-artifacts, reports) land in a directory the user owns.
WORKDIR /work
CMD ["python", "-m", "hpo", "run", "--help"]
