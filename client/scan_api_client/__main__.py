"""``python -m scan_api_client``: the same command line as ``scan-api``."""
from scan_api_client.cli import run

if __name__ == "__main__":
    run()
