"""The Ray backend: ephemeral resources as real Ray custom resources (or a ledger).

Install with ``pip install 'escher-sched[ray]'`` (Ray 2.40 to 2.60). See docs/ray.md.
"""

from escher.backends.ray.backend import MODES, RayBackend

__all__ = ["MODES", "RayBackend"]
