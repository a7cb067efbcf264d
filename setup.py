# The package's build script lives in python/setup.py; this lets `pip install .` run it from here.
import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parent / "python" / "setup.py"), run_name="__main__")
