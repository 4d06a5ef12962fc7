"""Entry point of the sandbox harness: tiny, so that Python compiles nothing at each start.

The real code lives in modules next to it, whose cached bytecode the read-only bind can serve.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import server

server.main(sys.argv)
