"""The work of a step per unit: compute, communication, the pipeline schedule."""
