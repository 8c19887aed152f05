"""The plan-file reader: a plan file read once, its identical entries grouped."""

from escher.verify.read._grouped import Grouping, as_written, load_grouped

__all__ = ["Grouping", "as_written", "load_grouped"]
