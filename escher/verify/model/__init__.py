"""Stage 1 of the pipeline: a (Plan, ClusterState) pair as an integer placement problem.

Statements (what the user said), quantity scales, planned capacities, node types, groups,
units and items; `build` runs these stages under one deadline and returns a `Problem`.
"""
