"""The Ray tests' cluster and helpers live in tests/support/ray_cluster.py (shared with the
chaos tests); re-exported here for the modules of this folder."""

from tests.support.ray_cluster import (
    NAMESPACE,
    OBJECT_STORE,
    make_backend,
    resize_supported,
    skip_unless_mode,
    start_cluster,
    stop_cluster,
)

__all__ = [
    "NAMESPACE",
    "OBJECT_STORE",
    "make_backend",
    "resize_supported",
    "skip_unless_mode",
    "start_cluster",
    "stop_cluster",
]
