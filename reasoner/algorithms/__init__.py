"""The algorithms' math as pure functions of tensors: advantages, KL estimators, losses, aggregation."""
