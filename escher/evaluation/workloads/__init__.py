"""One module per evaluation workload; each exposes ``run(quick, seed) -> Result``."""
