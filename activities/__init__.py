"""Side effects, as class-based activities whose dependencies are injected by the worker."""
