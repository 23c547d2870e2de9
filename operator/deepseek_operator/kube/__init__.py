"""Kubernetes I/O shared by the operator, the agent and the commands: where the API server is and
who we are to it (:mod:`.credentials`), the REST client for our writes (:mod:`.client`, its
error mapping, request encoding and writer threads) and the watches (:mod:`.list_watch`).

Nothing here decides anything about a DeepSeekServing; the pure core never imports it (the
``pure-core`` import contract)."""
