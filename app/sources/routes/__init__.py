"""The domain's HTTP routes, one module per resource."""
