"""The project's image, built for real once per session by ``hack/build-image.sh``.

The script installs and starts a Docker engine where none answers, builds a Python base image from
Debian packages and ``docker build``s the Dockerfile on it (cached under
``$DSO_CACHE``/``~/.cache/deepseek-operator``: a warm run takes seconds). A failure of the script
fails the tests that need the image; they never skip, so a machine that cannot build the image
cannot pass the suite.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "hack" / "build-image.sh"
# Cold: apt-get install docker.io + debootstrap + wheel download + build (~3 min on 2 cores).
BUILD_TIMEOUT_S = 1800


@dataclasses.dataclass(frozen=True)
class Image:
    """A built image and the Docker engine that holds it."""

    tag: str
    base: str
    docker_host: str
    router_tag: str = ""  # the router image (Dockerfile target router), built beside it

    def env(self) -> dict[str, str]:
        """The environment for the ``docker`` CLI to reach this engine."""
        env = dict(os.environ)
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        return env

    def docker(
        self, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker ARGS``; with *check*, fail the test (with its output) on a non-zero exit."""
        out = subprocess.run(
            ["docker", *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            input=stdin,
        )
        if check and out.returncode != 0:
            pytest.fail(
                f"docker {' '.join(args)} exited {out.returncode}\n"
                f"stdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}",
                pytrace=False,
            )
        return out

    def run(
        self, *args: str, flags: Sequence[str] = (), check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``docker run`` the image as the chart runs it: see :data:`HARDENED`."""
        return self.docker(
            "run", "--rm", *HARDENED, *flags, self.tag, *args, check=check, timeout=timeout
        )


# What the chart's operator and agent securityContext ask of the container runtime
# (charts/deepseek-operator/values.yaml): numeric non-root user, read-only root filesystem with an
# emptyDir on /tmp, every capability dropped, no privilege escalation. --network none: nothing the
# tests run inside may reach the network.
HARDENED = (
    "--user=65532:65532",
    "--read-only",
    "--tmpfs=/tmp:size=64m",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--network=none",
)


def parse_last_line(line: str) -> dict[str, str]:
    """``KEY=value KEY=value`` (the script's last line) as a dict; empty values allowed."""
    return dict(word.partition("=")[::2] for word in line.split())


@pytest.fixture(scope="session")
def image() -> Image:
    """Build (or reuse) the image; fail with the script's log when it cannot be built."""
    try:
        out = subprocess.run(
            [str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=BUILD_TIMEOUT_S,
            # The wheelhouse is downloaded by the pip of the Python running the tests.
            env=dict(os.environ, PYTHON=sys.executable),
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hack/build-image.sh ran over {BUILD_TIMEOUT_S} s: {exc.stderr!r}")
    if out.returncode != 0:
        pytest.fail(
            f"hack/build-image.sh exited {out.returncode}:\n{out.stderr[-5000:]}", pytrace=False
        )
    fields = parse_last_line(out.stdout.strip().splitlines()[-1])
    return Image(
        tag=fields["IMAGE"],
        base=fields["BASE"],
        docker_host=fields["DOCKER_HOST"],
        router_tag=fields["ROUTER_IMAGE"],
    )
