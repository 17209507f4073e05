"""Compare a jar cache with the jars scripts/jars/pom.xml lists (``artifactId-version.jar``).

    python scripts/jars/check.py POM DIR           exit 1 when a listed jar is missing in DIR
    python scripts/jars/check.py POM DIR --prune   remove other versions of the listed artifacts

scripts/setup.sh runs both: a cache that holds every jar of an older list (say the token provider
of another Spark release) is fetched again, and the superseded versions go, so the class path never
holds two versions of one artifact. Standard library only (it runs before the venv has packages).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def listed(pom: Path) -> dict[str, str]:
    """artifactId -> version of the POM's dependencies, ``${property}`` versions resolved."""
    root = ET.parse(pom).getroot()
    props = {el.tag.split("}", 1)[1]: (el.text or "").strip() for el in root.findall("m:properties/*", NS)}
    out = {}
    for dep in root.findall("m:dependencies/m:dependency", NS):
        artifact = dep.findtext("m:artifactId", namespaces=NS) or ""
        version = dep.findtext("m:version", namespaces=NS) or ""
        out[artifact] = re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), version)
    return out


def stale(folder: Path, artifacts: dict[str, str]) -> list[Path]:
    """Jars in ``folder`` of a listed artifact at another version."""
    found = []
    for jar in sorted(folder.glob("*.jar")):
        for artifact, version in artifacts.items():
            rest = jar.name.removeprefix(f"{artifact}-")
            if rest != jar.name and rest[:1].isdigit() and rest != f"{version}.jar":
                found.append(jar)
    return found


def main(argv: list[str]) -> int:
    pom, folder = Path(argv[0]), Path(argv[1])
    artifacts = listed(pom)
    if "--prune" in argv[2:]:
        for jar in stale(folder, artifacts):
            print(f"removing {jar.name} (superseded by {pom})")
            jar.unlink()
        return 0
    missing = [f"{a}-{v}.jar" for a, v in artifacts.items() if not (folder / f"{a}-{v}.jar").is_file()]
    if missing:
        print("missing: " + " ".join(missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
