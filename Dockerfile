# precision-hpo worker image (also serves optuna-dashboard in docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HPO_CACHE_DIR=/cache

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
RUN pip install . && useradd --create-home hpo && mkdir -p /cache && chown hpo /cache

USER hpo
CMD ["python", "-m", "hpo.run", "--help"]
