"""Events: the stored event feed, its list and its stream's announcements."""
