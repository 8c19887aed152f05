"""Test helpers shipped with escher: the backend conformance suite (needs pytest)."""
