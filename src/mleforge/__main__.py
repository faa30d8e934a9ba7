import sys

from mleforge.cli.main import main

sys.exit(main())
