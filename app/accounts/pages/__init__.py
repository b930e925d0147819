"""The domain's portal pages, one module per page or small group of pages."""
