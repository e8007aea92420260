"""npm packages the oracle tests drive through node (tiktoken, playwright-core), installed on first
use into a directory of the build tree (build/npm; tests that share it hold ctest's RESOURCE_LOCK npm)."""
import os
import subprocess
import sys


def ensure(npm_dir, packages):
    """npm-installs `packages` ("name@version") into npm_dir unless each is there already."""
    if all(os.path.isdir(os.path.join(npm_dir, "node_modules", p.rsplit("@", 1)[0])) for p in packages):
        return
    os.makedirs(npm_dir, exist_ok=True)
    subprocess.run(["npm", "install", "--prefix", npm_dir, "--no-audit", "--no-fund", "--loglevel=error", *packages],
                   check=True, stdout=sys.stderr)
