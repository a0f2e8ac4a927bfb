"""Ship a measured latency profile as the pair's reference profile: the one a fresh machine's app and
the cost-mode benches size trees from until that machine's own is measured.

    python -m taps.profile --max-nodes 128 --out results/profile-cpu        # on an idle machine
    python scripts/ship_reference_profile.py results/profile-cpu/profile.json [--commit HASH]

Writes assets/profiles/reference-cpu-<pair>.json: the measured profile, named "2-core reference
CPU", its source saying where, when and with which engine commit it was measured, and the pair's
shape (for the roofline what-if).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taps.cost_model import REFERENCE_PROFILES, LatencyProfile  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", help="profile.json written by `python -m taps.profile --out FOLDER`")
    parser.add_argument("--commit", help="the engine commit that measured it (default: HEAD)")
    parser.add_argument("--name", default="2-core reference CPU", help="the device in words")
    args = parser.parse_args(argv)
    from taps import load_pair
    from taps.roofline import model_shape

    profile = LatencyProfile.load(args.profile)
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip()
    pair = load_pair()
    if profile.key.get("fingerprint") != pair.fingerprint:
        raise SystemExit(f"{args.profile} was measured for other files than the shipped pair's")
    threads = profile.key.get("threads")
    folder = Path(args.profile).parent
    data = json.loads(Path(args.profile).read_text())
    data.update(kind="measured", device_name=args.name, dtype=profile.key.get("dtype", ""),
                model=model_shape(pair.target.config, pair.name),
                source=(f"measured on the {args.name} (AMD EPYC, {threads} threads, {profile.key.get('dtype')} target, "
                        f"{profile.key.get('drafter_precision')} drafter) by `python -m taps.profile` at engine commit "
                        f"{commit} on {profile.measured_at} ({folder.as_posix()}); shipped so that cost-mode trees run "
                        "before this machine's own profile is measured"))
    out = REFERENCE_PROFILES / f"reference-cpu-{pair.name}.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    LatencyProfile.load(out)                     # it reads back
    print(f"wrote {out.relative_to(ROOT)}: {data['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
