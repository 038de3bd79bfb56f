"""`tiersim plan`: search the choices a scenario leaves open for the best plans that fit."""

OBJECTIVES = ("tokens_per_s", "goodput", "cost")  # what `tiersim plan --objective` ranks by
