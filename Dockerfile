# syntax=docker/dockerfile:1
# kpe's image (BuildKit, the default since Docker 23):
#   docker build --build-arg KPE_COMMIT=$(git rev-parse --short HEAD) -t kpe:0.1.0 .
# Two stages: the builder turns the project and its dependencies into wheels;
# the final stage installs only those wheels into a venv, so no compiler,
# build backend or source tree ends up in the image.

ARG PYTHON_IMAGE=python:3.11-slim

# -- builder ----------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine/ engine/
COPY server/ server/
COPY schemas/ schemas/
# Every dependency publishes wheels for CPython 3.11 on linux amd64 and arm64, so
# this stage needs no compiler either; a platform without them would need
# build-essential here (in this stage only).
# The commit for `kpe --version` (server/cli/release.py): the wheel carries no git history,
# so the build writes it down. Without the argument the image says "commit unknown".
ARG KPE_COMMIT=""
RUN python -c 'import json, sys; json.dump({"commit": sys.argv[1]}, open("server/buildinfo.json", "w"))' "$KPE_COMMIT" \
 && pip wheel --wheel-dir /wheels .

# -- final ------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/kpe \
    PATH=/opt/kpe/bin:$PATH

# The wheels are bind-mounted from the builder, not copied, so they never form a
# layer; the venv gets no pip of its own (the base image's pip installs into it).
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/kpe \
 && pip --python /opt/kpe/bin/python install --no-index --find-links /wheels kube-policy-extender


# No policy is baked in: kpe serves the policies it is given (KPE_POLICIES; in
# Kubernetes the kpe-policies ConfigMap, deploy/deployment.yaml) and refuses to start
# without any. The examples are in the repository's policies/.
ENV KPE_PORT=8443

# A fixed numeric UID, so Kubernetes' runAsNonRoot can verify it (deploy/ uses the same).
RUN groupadd --system --gid 10001 kpe \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kpe
USER 10001:10001

# The extender verbs, the admission webhook, and probes and metrics (deploy/ sets the
# ports of the last two; introspection listens on loopback and is not exposed).
EXPOSE 8443 9443 8080
ENTRYPOINT ["kpe", "serve", "--host", "0.0.0.0"]
