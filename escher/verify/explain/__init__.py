"""Stage 3 of the pipeline: minimal conflicts and intent proofs, in the user's statements."""
