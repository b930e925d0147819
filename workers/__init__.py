"""RQ workers: engine tracking jobs, webhook deliveries and the recovery sweep."""
