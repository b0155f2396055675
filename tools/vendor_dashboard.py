"""Unpack the dashboard's JavaScript (``millpond serve --http``) into the package: pinned npm
packages, fetched once with ``npm pack`` (checked against their pinned integrity), their built files
copied with their licences to ``src/millpond/dashboard_static/vendor``. Run by ``make setup``; the
page fetches nothing when it loads.

    python tools/vendor_dashboard.py [--force]
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VENDOR = Path(__file__).resolve().parent.parent / "src" / "millpond" / "dashboard_static" / "vendor"

# package@version -> (its sha512 integrity, {file in its tarball: name under vendor/})
PACKAGES = {
    "cytoscape@3.35.0": ("sMvBIXiGMnhkCaWz2R06FwF/27MNlS+Tqvi17foO9UhnUg3XGZccKjxsvEqQFAQYMSSZmN5SxYzUYlQ0DOJJ3g==",
                         {"package/dist/cytoscape.min.js": "cytoscape.min.js",
                          "package/LICENSE": "cytoscape.LICENSE"}),
    "dagre@0.8.5": ("/aTqmnRta7x7MCCpExk7HQL2O4owCT2h8NT//9I1OQ9vt29Pa0BzSAkR5lwFUcQ7491yVi/3CXU9jQ5o0Mn2Sw==",
                    {"package/dist/dagre.min.js": "dagre.min.js", "package/LICENSE": "dagre.LICENSE"}),
    "cytoscape-dagre@2.5.0": ("VG2Knemmshop4kh5fpLO27rYcyUaaDkRw+6PiX4bstpB+QFt0p2oauMrsjVbUamGWQ6YNavh7x2em2uZlzV44g==",
                              {"package/cytoscape-dagre.js": "cytoscape-dagre.js",
                               "package/LICENSE": "cytoscape-dagre.LICENSE"}),
    "uplot@1.6.32": ("KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==",
                     {"package/dist/uPlot.iife.min.js": "uPlot.iife.min.js", "package/dist/uPlot.min.css": "uPlot.min.css",
                      "package/LICENSE": "uplot.LICENSE"}),
}


def main(force: bool = False) -> int:
    wanted = [name for _, files in PACKAGES.values() for name in files.values()]
    if not force and all((VENDOR / n).is_file() for n in wanted):
        return 0
    if shutil.which("npm") is None:
        print("vendor_dashboard: npm not found: the dashboard (millpond serve --http) will not start "
              "until this runs with Node.js's npm", file=sys.stderr)
        return 0
    VENDOR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec, (integrity, files) in PACKAGES.items():
            out = subprocess.run(["npm", "pack", spec, "--silent", "--pack-destination", tmp], capture_output=True,
                                 text=True, timeout=300)
            if out.returncode != 0:
                raise SystemExit(f"vendor_dashboard: npm pack {spec} failed: {out.stderr.strip()[-500:]}")
            tarball = Path(tmp) / out.stdout.strip().splitlines()[-1]
            digest = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
            if digest != integrity:
                raise SystemExit(f"vendor_dashboard: {spec}'s tarball is not the pinned one (sha512 {digest})")
            with tarfile.open(tarball) as tar:
                for member, name in files.items():
                    source = tar.extractfile(member)
                    if source is None:
                        raise SystemExit(f"vendor_dashboard: {spec} has no {member}")
                    (VENDOR / name).write_bytes(source.read())
    print(f"vendor_dashboard: {len(wanted)} files under {VENDOR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(force="--force" in sys.argv[1:]))
