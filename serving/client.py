"""``python -m serving.client``: the command every bundle's model card prints; its code is serving/tools/client_cli.py."""

import sys

from serving.tools.client_cli import main

if __name__ == "__main__":
    sys.exit(main())
