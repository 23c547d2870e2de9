"""The DeepSeekServing API: the typed spec and status, their rules, the CRD made from them.

:mod:`.spec` and :mod:`.status` are the pydantic models, the one source of the CRD's schema
(:mod:`.crd` generates it; ``deepseek-operator crds``), all built on the one
base :class:`.base.ApiModel`. :mod:`.rules` holds the static
spec rules, one module per thing checked, each rule defined once and enforced twice: as CEL in the CRD (the API server refuses a bad
object at admission) and in Python on load. :mod:`.load` turns an object (YAML or the API
server's dict) into a validated spec; :mod:`.admission` admits one offline exactly as the API
server would, from the generated CRD (its schema walker :mod:`.admission_schema`, its CEL
:mod:`.admission_cel`). :mod:`.core_v1` and :mod:`.core_v1_env` type the pod-template parts a
spec embeds, :mod:`.extra_args` reads ``spec.engine.extraArgs`` as vLLM's parser does, and
:mod:`.backends` holds the ``--moe-backend`` names of every supported release.

Pure (no I/O, no clock): it imports only the catalog, ``names`` and ``errors``.
"""
