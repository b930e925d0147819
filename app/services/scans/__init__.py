"""Scans: admission, bulk input, results and findings, reads, purposes."""
