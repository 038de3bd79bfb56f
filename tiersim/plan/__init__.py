"""`tiersim plan`: search the choices a scenario leaves open for the best plans that fit."""
