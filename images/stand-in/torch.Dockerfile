# Stand-in for pytorch/pytorch on machines that cannot pull it (scripts/build-stand-in-bases.sh):
# the stand-in Python base plus the CPU build of torch, whose wheel is the build context.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# torch's own dependencies (sympy, networkx, jinja2, fsspec...) come from PyPI.
RUN --mount=type=bind,source=.,target=/wheels \
    pip install /wheels/torch-*.whl \
    && python -c "import torch"
