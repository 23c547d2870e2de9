"""Tests that build the project's image with Docker and run it (hack/build-image.sh)."""
