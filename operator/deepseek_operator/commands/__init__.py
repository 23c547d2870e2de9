"""One module per subcommand, each owning its flags: run, agent, render, topology, crds."""
