"""envcheck: which sandbox environments can an RL run trust?

The stages, in the order imports may flow (see ARCHITECTURE.md): core, catalogue, net,
sandbox, kinds, executors, store, health, feed, then the consumers api, notify, metrics,
schedule, dashboard, cli and the one composition root, daemon. ``client`` stands apart:
schedulers import it with requests alone."""
