"""The plan-file reader: a plan file read once, its identical entries grouped."""
