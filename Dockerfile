# One image for the operator (`deepseek-operator run`, the default) and the node agent
# (`deepseek-operator agent`). Build: docker build -t deepseek-operator:0.1.0 .
#
# A second image, target `router`, runs vLLM's router (vllm-router from PyPI, pinned with its
# dependencies in router-requirements.txt) in front of a serving's engines:
#   docker build --target router -t deepseek-operator-router:0.1.17 .
# A second image rather than a second entrypoint of this one: the router runs in every serving's
# namespace with a pods-read token, so it carries vllm-router alone (no operator code, no
# Kubernetes client), and the two images version apart (the tag is the vllm-router release).
# Its stages come first so that a build without --target still gives the operator image (the last
# stage); the classic builder builds them too, from the same wheelhouse.
#
# The install step is CI's (Makefile `venv`): pip with `-c constraints.txt`, so the image runs the
# exact dependency versions the tests ran. constraints.txt also pins dev tools (pytest, ruff, mypy),
# but a constraints file only pins what is installed anyway; installing `.` (no extras) pulls in the
# runtime dependencies alone. tests/unit/test_dockerfile.py checks both stay in step.
#
# Base: the Python CI runs (3.11.7), Debian bookworm slim. Pin a digest as well when you publish:
#   python:3.11.7-slim-bookworm@sha256:<digest>
# BASE_IMAGE replaces it where no registry is reachable: hack/build-image.sh builds a Python base
# from Debian packages (debootstrap) and passes --build-arg BASE_IMAGE=<that image>. Any base with
# Python >= 3.11 as `python`, its venv module, and groupadd/useradd works.
#
# No `# syntax=` line: it would make BuildKit pull a frontend image from Docker Hub, so the build
# could not run offline; nothing here needs more than the built-in frontend.
ARG BASE_IMAGE=python:3.11.7-slim-bookworm

FROM ${BASE_IMAGE} AS router-build
ARG PIP_INDEX_URL
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY router-requirements.txt ./
# vllm-router's wheel is manylinux_2_28 x86_64 abi3 (a Rust core): bookworm's glibc 2.36 runs it.
RUN python -m venv /opt/router \
    && /opt/router/bin/pip install --quiet --no-deps -r router-requirements.txt \
    && /opt/router/bin/vllm-router --help >/dev/null

FROM ${BASE_IMAGE} AS router
LABEL org.opencontainers.image.title="deepseek-operator-router" \
      org.opencontainers.image.description="vLLM's router (vllm-router) in front of a DeepSeekServing" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 65532 deepseek \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin deepseek
COPY --from=router-build /opt/router /opt/router
ENV PATH=/opt/router/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so `runAsNonRoot: true` can verify it; the pod runs it with a read-only root.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8000
ENTRYPOINT ["vllm-router"]
CMD ["--help"]

FROM ${BASE_IMAGE} AS build
# Where pip finds packages, for mirrors and offline builds (hack/build-image.sh serves a wheelhouse
# with PIP_NO_INDEX=1 PIP_FIND_LINKS=http://127.0.0.1:PORT/); unset, pip uses PyPI. Build args are
# in the RUN environment only, never in the image.
ARG PIP_INDEX_URL
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml constraints.txt ./
COPY operator/ operator/
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --quiet -c constraints.txt . \
    && /opt/venv/bin/deepseek-operator --help >/dev/null

FROM ${BASE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="deepseek-operator" \
      org.opencontainers.image.description="DeepSeek V4/V4.1 on vLLM: operator and node agent" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 65532 deepseek \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin deepseek
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so `runAsNonRoot: true` can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["deepseek-operator"]
CMD ["run"]
