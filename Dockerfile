# gradlab image: one image for the web and the worker services of docker-compose.yml.
#   CPU build (default):  docker build -t gradlab .
#   CUDA build (GPU hosts): docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 -t gradlab:cuda .
#   Another base (same Debian release; it needs python, python -m venv, apt-get):
#     --build-arg PYTHON_IMAGE=...  (scripts/compose-check.sh: a local mmdebstrap image)
# The CUDA wheels bring their own CUDA runtime; the host needs the NVIDIA driver and the NVIDIA
# Container Toolkit (see docs/deployment.md). Not built in this repository's CI (no Docker engine).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/gradlab
COPY pyproject.toml constraints.txt README.md ./
COPY gradlab gradlab
COPY app app
COPY worker worker
# torch first, from the chosen wheel index (CPU or a CUDA build), then gradlab with PostgreSQL
RUN /opt/gradlab/bin/pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
 && /opt/gradlab/bin/pip install -c constraints.txt ".[postgres]"
# UI catalogs: .po -> .mo (the .mo files are build outputs, never committed)
RUN /opt/gradlab/bin/pybabel -q compile -d app/translations -D messages

FROM ${PYTHON_IMAGE} AS runtime
# bubblewrap: the sandbox; libseccomp2: its syscall filter; tini: reaps the sandboxes' children
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libseccomp2 tini \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/gradlab /opt/gradlab
WORKDIR /srv/gradlab
COPY gradlab gradlab
COPY app app
COPY worker worker
COPY --from=build /src/app/translations app/translations
COPY lessons lessons
COPY static static
COPY templates templates
COPY pyproject.toml README.md ./
# PYTHONPATH: gradlab runs from this folder, next to lessons/, static/ and templates/ (which it
# finds beside its code) and the compiled catalogs, not from the copy pip put in site-packages
ENV PATH=/opt/gradlab/bin:$PATH \
    PYTHONPATH=/srv/gradlab \
    PYTHONUNBUFFERED=1 \
    GRADLAB_DATA_DIR=/var/lib/gradlab \
    GRADLAB_CONTENT_DIR=/srv/gradlab/lessons \
    GRADLAB_LOG_FORMAT=json
RUN mkdir -p /var/lib/gradlab
# The worker runs as root inside the container: bwrap then drops every job to the unprivileged
# GRADLAB_SANDBOX_HOST_UID (65534) in a fresh user namespace (docs/deployment.md).
ENTRYPOINT ["/usr/bin/tini", "--", "gradlab"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "0"]
EXPOSE 8000
