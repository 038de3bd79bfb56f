"""Flash wear and durable-checkpoint policy from simulated results."""
