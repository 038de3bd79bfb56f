"""The ordered operations of a step and their discrete-event simulation (SimPy)."""
