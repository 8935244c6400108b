"""`python -m meta_agent`."""

import sys

from meta_agent.cli.main import main

sys.exit(main())
