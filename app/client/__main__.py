"""``python -m app.client``: the command line of the Public Scan API client."""
import sys

from app.client.cli import main

if __name__ == "__main__":
    sys.exit(main())
