"""The executor tests import their unit functions as a top-level module (a worker must import them too)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
