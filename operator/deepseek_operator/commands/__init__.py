"""One module per subcommand (``render``: a package), each owning its flags: run, agent, render,
topology, crds."""
