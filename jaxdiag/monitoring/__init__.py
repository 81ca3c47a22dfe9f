"""``jaxdiag.monitor`` and what it writes: an always-on watch over a long training run."""
