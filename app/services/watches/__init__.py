"""Watches: targets scanned again on a schedule, and the changes they announce."""
