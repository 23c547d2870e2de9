"""The static spec rules: one definition, two enforcers.

Each rule (:class:`.rule.SpecRule`) carries a CEL expression, rendered into the CRD as an
``x-kubernetes-validations`` entry so the API server refuses the object at ``kubectl apply``, and
a Python predicate that the loader runs on a parsed spec so the offline ``render`` refuses the
same object, with ONE message, so both say the same words. Only rules that need nothing but the
spec live here; anything that depends on nodes or on catalog facts is a status condition.

One module per thing checked:

* :mod:`.rule` - the shape of a rule, the CEL literals and the GPU-resource test the tables share;
* :mod:`.cross_field` - the MoE backend against the layout, sizes that divide each other;
* :mod:`.extra_args` - ``spec.engine.extraArgs`` (owned flags, EPLB's spelling, vLLM's options);
* :mod:`.values` - single values: size bounds, flag-like strings, model and object names;
* :mod:`.disaggregation` - ``spec.disaggregation`` and the fields its roles replace;
* :mod:`.check` - the ordered table of them all, run on the spec and on each role.

The import contract ``spec-rules`` (pyproject.toml) keeps these layers: check over the four
rule families, which never import each other, over rule.
"""
