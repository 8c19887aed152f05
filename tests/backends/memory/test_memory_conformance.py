"""The conformance suite on the in-memory backend, in real and in virtual time."""

from escher.testing.conformance import BackendConformance

NODES = {"a": {"CPU": 2}, "b": {"CPU": 2}, "c": {"CPU": 4, "GPU": 1}}


class TestMemoryConformance(BackendConformance):
    backend_name, backend_options = "memory", {"nodes": NODES}


class TestMemoryVirtualClockConformance(BackendConformance):
    backend_name, backend_options = "memory", {"nodes": NODES, "virtual_clock": True}
