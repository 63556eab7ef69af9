"""Where and how a command runs: Ray, ranks and world size, configs, logs, progress."""
