"""``deepseek-operator crds``: print the DeepSeekServing CRD generated from the pydantic models."""

from __future__ import annotations

import argparse
import sys

from deepseek_operator.api.crd import crd_yaml

NAME = "crds"
HELP = "print the generated DeepSeekServing CustomResourceDefinition"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``crds`` takes no flags."""
    del parser


def run(args: argparse.Namespace) -> int:
    """Print the generated CRD."""
    del args
    sys.stdout.write(crd_yaml())
    return 0
