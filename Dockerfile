# The runner image for Python callables on Kubernetes: escher (with cloudpickle) on the same
# Python minor version as the driver. Build it from the repository root, for your driver's
# version, add your own code, and push it where your cluster pulls from:
#
#   docker build --build-arg PYTHON_VERSION=3.11 -t registry.example.com/escher-runner:py3.11 .
#   docker push registry.example.com/escher-runner:py3.11
#
# Tasks run `python -m escher.backends.kubernetes.runner` (the pod sets the command), which
# fails the task with a clear error when the driver's Python version is not this image's.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/escher
COPY pyproject.toml README.md ./
COPY escher ./escher
# Installs this source tree (pinning is the job of your own requirements).
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[k8s]" \
    && python -c "import cloudpickle, kubernetes, escher.backends.kubernetes.runner"

# Your tasks' code and its dependencies, e.g.:
#   COPY my_app ./my_app
#   RUN pip install --no-cache-dir ./my_app

RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin escher
USER 10001
CMD ["python", "-m", "escher.backends.kubernetes.runner"]
