"""``python -m scan_api_client``: the same command line as ``scan-api``."""
import sys

from scan_api_client.cli import main

if __name__ == "__main__":
    sys.exit(main())
