"""On PYTHONPATH, makes triton unimportable: the CPU-only install that leaves it out (CI runs the CPU tests so)."""
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ImportError(f"No module named {name!r} (hidden)")
        return None
sys.meta_path.insert(0, _Block())
