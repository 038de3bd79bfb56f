"""Tiers, links, routes and what collectives cost on them."""
