"""``python -m serving.client``: the command every bundle's model card prints; the client is serving/tools/client.py."""

import sys

from serving.tools.client import main

if __name__ == "__main__":
    sys.exit(main())
