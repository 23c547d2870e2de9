"""The kind tier: the chart on a kind cluster whose node image is built here (hack/build-kind-node.sh)."""
