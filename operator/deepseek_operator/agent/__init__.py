"""The node agent (``deepseek-operator agent``): measure this node's GPUs, publish them on its Node.

A DaemonSet pod per GPU node reads what GPU Feature Discovery cannot (the GPU×GPU NVLink
topology, the fabric clique) and publishes it as ``gpu.deepseek-operator.io/`` labels and one
JSON annotation on its own Node, which the operator's node facts (:mod:`deepseek_operator.nodes`)
read back. Two halves, kept apart by the import contracts:

* pure: :mod:`.gpu_topology` (the measured facts, :class:`~.gpu_topology.GpuTopology`),
  :mod:`.topo_smi` (a captured ``nvidia-smi topo -m`` parsed into one) and :mod:`.labels`
  (the labels and annotation for one), shared with the offline ``topology`` command;
* I/O: :mod:`.probe` (the probe protocol and recorded probes), :mod:`.nvml` (the real probe,
  the only importer of ``pynvml``), :mod:`.publisher` (the Node patch, touching nothing else),
  :mod:`.logs` and :mod:`.main` (the loop).

The agent never imports the controller, nor the controller the agent.
"""
