"""`python -m meta_agent`."""

import sys

from meta_agent.cli import main

sys.exit(main())
