"""`meta-agent ARGS...` with cProfile switched on by SIGUSR1 and off by SIGUSR2, which writes the profile to the file
BENCH_PROFILE_FILE names: a profile of the bursts alone, not of the start (benchmarks/profile_run.py)."""

import cProfile
import os
import signal
import sys

from meta_agent.cli.main import main

if __name__ == "__main__":
    profile = cProfile.Profile()

    def stop(*_: object) -> None:
        profile.disable()
        profile.dump_stats(os.environ["BENCH_PROFILE_FILE"])

    signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["meta-agent", *sys.argv[1:]]
    sys.exit(main())
