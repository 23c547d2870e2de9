"""Kubernetes I/O shared by the operator, the agent and the commands: where the API server is and
who we are to it (:mod:`.credentials`), the REST transport (:mod:`.rest`: requests, 429
retries, discovery; its error mapping and request encoding), the client for our writes over it
(:mod:`.client`, with its writer threads) and the watches (:mod:`.list_watch`).

Nothing here decides anything about a DeepSeekServing; the pure core never imports it (the
``pure-core`` import contract)."""
